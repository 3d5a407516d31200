//go:build unix

package fileio

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// ReadFlags open a file for reading without waiting: with O_NONBLOCK a
// FIFO that took the place of a regular file opens at once instead of
// blocking the thread until a writer comes, and the caller checks with
// fstat what it opened. On a regular file O_NONBLOCK changes nothing.
const ReadFlags = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC

// OpenRead opens path with ReadFlags as an *os.File.
func OpenRead(path string) (*os.File, error) {
	return os.OpenFile(path, ReadFlags, 0)
}

// OpenFD opens path with ReadFlags and extra as a bare descriptor, which
// costs no poller registration and no finalizer as an *os.File does; an
// error is the errno.
func OpenFD(path string, extra int) (int, error) {
	for {
		fd, err := unix.Open(path, ReadFlags|extra, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// OpenRegular opens path (OpenFD) and returns it with its size if fstat
// says it is a regular file; anything else is closed (ErrNotRegular).
// Checking what was opened leaves no window for another file to take the
// path, as a stat before the open would.
func OpenRegular(path string) (File, int64, error) {
	fd, err := OpenFD(path, 0)
	if err != nil {
		return nil, 0, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, 0, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	if uint32(st.Mode)&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, 0, &fs.PathError{Op: "open", Path: path, Err: ErrNotRegular}
	}
	return descriptor(fd), st.Size, nil
}

type descriptor int

func (d descriptor) Fd() uintptr  { return uintptr(d) }
func (d descriptor) Close() error { return unix.Close(int(d)) }

func (d descriptor) ReadAt(p []byte, off int64) (int, error) {
	n, err := ReadAt(int(d), p, off)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("pread: %w", err)
	}
	return n, err
}

// ReadAt reads len(p) bytes of fd at off with pread, as os.File.ReadAt
// does: it goes on after short reads and EINTR, and stops short only at
// the end of the file (io.EOF) or on a failure (the errno).
func ReadAt(fd int, p []byte, off int64) (int, error) {
	done := 0
	for done < len(p) {
		n, err := unix.Pread(fd, p[done:], off+int64(done))
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return done, err
		case n == 0:
			return done, io.EOF
		}
		done += n
	}
	return done, nil
}

// FDLimit is the size of the fd table (RLIMIT_NOFILE's soft limit), 0 if
// it cannot be read.
func FDLimit() uint64 {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return 0
	}
	return uint64(lim.Cur) // int64 on FreeBSD, uint64 elsewhere
}
