//go:build unix

package statacc

import (
	"os"
	"syscall"
)

// openFile opens a file for reading without following it into a hang: with
// O_NONBLOCK a FIFO that slipped in since the stat opens at once instead of
// blocking a worker until a writer comes (nginx does the same).
func openFile(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
}

func fileFD(f *os.File) int { return int(f.Fd()) }

func rlimitNoFile() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	// Cur is int64 on FreeBSD, uint64 elsewhere.
	return uint64(lim.Cur)
}
