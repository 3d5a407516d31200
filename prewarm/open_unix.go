//go:build unix

package prewarm

import (
	"os"
	"syscall"
)

// openRead opens path for reading without waiting: with O_NONBLOCK a FIFO
// (or a device) that took the place of a regular file opens at once
// instead of blocking the thread until a writer comes; the caller checks
// with fstat what it opened. On a regular file O_NONBLOCK changes nothing.
func openRead(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
}

// tableNearlyFull reports whether a descriptor numbered fd, just opened,
// is in the last eighth of the fd table (RLIMIT_NOFILE): the kernel hands
// out the lowest free number, so the table is then mostly taken, and a
// warm-up leaves the rest to the server's connections and its cache.
// (Holes below make it an underestimate: an open that finds the table
// full is the other signal, fdGate.)
func tableNearlyFull(fd uintptr) bool {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return false
	}
	limit := uint64(lim.Cur) // int64 on FreeBSD, uint64 elsewhere
	return uint64(fd)+limit/8 >= limit
}
