//go:build linux && !flashserve_portable

package transmit

import (
	"math/bits"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cachedBytes reads len(b) bytes at off with preadv2(RWF_NOWAIT) and
// returns how many it got, 0 on any error. It calls the kernel directly,
// with the iovec on the stack, so that a probe allocates nothing.
func cachedBytes(fd int, b []byte, off int64) int {
	iov := unix.Iovec{Base: &b[0]}
	iov.SetLen(len(b))
	// The offset as the system call takes it: low and high words (the
	// high one is 0 on 64-bit machines).
	lo, hi := uintptr(off), uintptr(uint64(off)>>(bits.UintSize-1)>>1)
	for {
		n, _, errno := unix.Syscall6(unix.SYS_PREADV2, uintptr(fd), uintptr(unsafe.Pointer(&iov)), 1, lo, hi, unix.RWF_NOWAIT)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return 0
		}
		return int(n)
	}
}
