//go:build linux && !flashserve_portable

package statacc

import (
	"io"
	"io/fs"
	"path/filepath"
	"syscall"
	"time"
)

// rawFile is a bare descriptor of a regular file, the handle of the
// cache's own lookups. An *os.File would cost each miss an epoll_ctl (the
// poller refuses regular files, but only after the call), a finalizer and
// two more allocations, and its Close the poller's bookkeeping: on a tree
// that churns through its descriptors, as many as there are requests. The
// entry's reference count already keeps the descriptor open while any
// response reads it, which is what *os.File's locking would add.
type rawFile struct {
	fd   int
	path string
}

// openRegularFile opens path for reading, as openFile does (O_NONBLOCK: a
// FIFO cannot block the open), with a bare descriptor. viaLink reports
// that path's last element is a symbolic link: it is opened with
// O_NOFOLLOW first, which costs nothing more for a file that is not one,
// and again without it when it is (ELOOP).
func openRegularFile(path string) (h handle, viaLink bool, err error) {
	flags := syscall.O_RDONLY | syscall.O_NONBLOCK | syscall.O_NOCTTY | syscall.O_CLOEXEC | syscall.O_NOFOLLOW
	for {
		fd, err := syscall.Open(path, flags, 0)
		switch {
		case err == nil:
			return &rawFile{fd: fd, path: path}, viaLink, nil
		case err == syscall.EINTR:
			continue
		case err == syscall.ELOOP && flags&syscall.O_NOFOLLOW != 0:
			// The last element is a link (or the links on the way are
			// too many, which the open that follows says again).
			flags &^= syscall.O_NOFOLLOW
			viaLink = true
			continue
		}
		return nil, viaLink, &fs.PathError{Op: "open", Path: path, Err: err}
	}
}

// multiplyLinked reports whether info describes a regular file with more
// than one name (a hard link): it can be written through a name in a
// directory that is not watched.
func multiplyLinked(info fs.FileInfo) bool {
	if info == nil || !info.Mode().IsRegular() {
		return false
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && st.Nlink > 1
}

// wrapFD makes the handle of a descriptor opened by the caller.
func wrapFD(fd int, path string) handle { return &rawFile{fd: fd, path: path} }

// statHandle describes what h has open, with one fstat.
func statHandle(h handle) (fs.FileInfo, error) {
	r, ok := h.(*rawFile)
	if !ok {
		return statOSFile(h)
	}
	si := &statInfo{path: r.path}
	for {
		err := syscall.Fstat(r.fd, &si.st)
		if err == nil {
			return si, nil
		}
		if err != syscall.EINTR {
			return nil, &fs.PathError{Op: "stat", Path: r.path, Err: err}
		}
	}
}

// ReadAt reads len(p) bytes from off with pread, as os.File.ReadAt does:
// short only at the end of the file (io.EOF) or on an error.
func (r *rawFile) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for len(p) > 0 {
		m, err := syscall.Pread(r.fd, p, off)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return n, &fs.PathError{Op: "read", Path: r.path, Err: err}
		}
		if m == 0 {
			return n, io.EOF
		}
		n += m
		p = p[m:]
		off += int64(m)
	}
	return n, nil
}

// Close closes the descriptor, once (the entry's last Release). It is not
// retried on EINTR: Linux has released the descriptor by then.
func (r *rawFile) Close() error { return syscall.Close(r.fd) }

// statInfo is the fs.FileInfo of one fstat, as os.File.Stat makes it.
type statInfo struct {
	path string
	st   syscall.Stat_t
}

func (s *statInfo) Name() string       { return filepath.Base(s.path) }
func (s *statInfo) Size() int64        { return s.st.Size }
func (s *statInfo) ModTime() time.Time { return time.Unix(s.st.Mtim.Unix()) }
func (s *statInfo) IsDir() bool        { return s.Mode().IsDir() }
func (s *statInfo) Sys() any           { return &s.st }

// Mode converts the stat mode as package os does.
func (s *statInfo) Mode() fs.FileMode {
	m := fs.FileMode(s.st.Mode & 0o777)
	switch s.st.Mode & syscall.S_IFMT {
	case syscall.S_IFBLK:
		m |= fs.ModeDevice
	case syscall.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFDIR:
		m |= fs.ModeDir
	case syscall.S_IFIFO:
		m |= fs.ModeNamedPipe
	case syscall.S_IFLNK:
		m |= fs.ModeSymlink
	case syscall.S_IFSOCK:
		m |= fs.ModeSocket
	}
	if s.st.Mode&syscall.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if s.st.Mode&syscall.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if s.st.Mode&syscall.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// handleFD is the descriptor of a handle.
func handleFD(h handle) int {
	if r, ok := h.(*rawFile); ok {
		return r.fd
	}
	return fileFD(osFileOf(h))
}
