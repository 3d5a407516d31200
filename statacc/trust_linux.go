//go:build linux && !flashserve_portable

package statacc

import (
	"errors"
	"io/fs"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// MincoreTrusted reports whether mincore(2) tells this process the truth
// about which pages of the open file fd (described by info, from the fstat
// already made) are in the page cache. Since Linux 5.0 it does only for
// the file's owner or a process that may write the file, and reports every
// page resident to anyone else (cachestat(2) refuses them with EPERM): a
// server running as its own user that serves files someone else owns would
// see cold data as cached. The owner is read from info; write access costs
// one faccessat2 with the effective ids, as the kernel checks it.
func MincoreTrusted(fd int, info fs.FileInfo) bool {
	if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) == os.Geteuid() {
		return true
	}
	err := unix.Faccessat2(fd, "", unix.W_OK, unix.AT_EACCESS|unix.AT_EMPTY_PATH)
	if errors.Is(err, unix.ENOSYS) {
		// Before Linux 5.8: x/sys's Faccessat then checks the mode bits
		// against the effective ids itself, which needs a path.
		err = unix.Faccessat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.W_OK, unix.AT_EACCESS)
	}
	// Any refusal (EACCES, EROFS, EPERM, a seccomp filter) leaves the file
	// untrusted: probing it without mincore costs a few system calls, where
	// trusting a lying mincore would hold threads in blocking reads.
	return err == nil
}
