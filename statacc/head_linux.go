//go:build linux && !flashserve_portable

package statacc

import (
	"os"

	"golang.org/x/sys/unix"
)

// readHead reads the head of a file only if the page cache holds it
// (RWF_NOWAIT): a worker never waits for the disk for a head, and the
// body of a cold file is read through io_uring as a whole.
func readHead(f *os.File, head []byte) (int, error) {
	for {
		n, err := unix.Preadv2(int(f.Fd()), [][]byte{head}, 0, unix.RWF_NOWAIT)
		if err == unix.EINTR {
			continue
		}
		return max(n, 0), err
	}
}
