//go:build unix

package prewarm

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// openRead opens path for reading without waiting: with O_NONBLOCK a FIFO
// (or a device) that took the place of a regular file opens at once
// instead of blocking the thread until a writer comes; the caller checks
// with fstat what it opened. On a regular file O_NONBLOCK changes nothing.
func openRead(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
}

// rawFile is a file a warm-up reads: a bare descriptor, not an *os.File.
// An *os.File tries to register every descriptor with the runtime's
// poller (an epoll_ctl that fails for a regular file) and sets a
// finalizer; a warm-up opens, reads and closes each file once, so that is
// a syscall in six it does not need.
type rawFile int

// openWarm opens the file at path as openRegular does (O_NONBLOCK, then
// fstat what was opened) and returns it with its size.
func openWarm(path string) (readFile, int64, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		if err == unix.ENOENT {
			return nil, 0, errSkipped
		}
		return nil, 0, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, 0, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	if uint32(st.Mode)&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, 0, errSkipped
	}
	return rawFile(fd), st.Size, nil
}

func (f rawFile) Fd() uintptr  { return uintptr(f) }
func (f rawFile) Close() error { return unix.Close(int(f)) }

// ReadAt reads len(b) bytes at off as os.File's does: it goes on after
// short reads and returns io.EOF where the file ends first.
func (f rawFile) ReadAt(b []byte, off int64) (int, error) {
	done := 0
	for done < len(b) {
		n, err := unix.Pread(int(f), b[done:], off+int64(done))
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return done, fmt.Errorf("pread: %w", err)
		case n == 0:
			return done, io.EOF
		}
		done += n
	}
	return done, nil
}

// fdLimit is the size of the fd table (RLIMIT_NOFILE's soft limit), 0 if
// it cannot be read. A warm-up reads it once per pass, not per file: a
// limit lowered during a pass is met by the opens that fail (fdGate).
func fdLimit() uint64 {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return 0
	}
	return uint64(lim.Cur) // int64 on FreeBSD, uint64 elsewhere
}

// tableNearlyFull reports whether a descriptor numbered fd, just opened,
// is in the last eighth of an fd table of limit descriptors (fdLimit; 0
// for unknown): the kernel hands out the lowest free number, so the table
// is then mostly taken, and a warm-up leaves the rest to the server's
// connections and its cache. (Holes below make it an underestimate: an
// open that finds the table full is the other signal, fdGate.)
func tableNearlyFull(fd uintptr, limit uint64) bool {
	return limit > 0 && uint64(fd)+limit/8 >= limit
}
