//go:build linux && !flashserve_portable

package statacc

import (
	"io"
	"io/fs"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/flashserve/caddy-flash-serve/internal/fileio"
)

// fileRef is a bare descriptor of a regular file, the open file of the
// cache's own lookups. An *os.File would cost each miss an epoll_ctl (the
// poller refuses regular files, but only after the call), a finalizer and
// two more allocations, and its Close the poller's bookkeeping: on a tree
// that churns through its descriptors, as many as there are requests. The
// entry's reference count already keeps the descriptor open while any
// response reads it, which is what *os.File's locking would add. It is a
// value, kept in the Entry: the descriptor costs no allocation of its own.
// A descriptor fits in an int32 (the kernel's nr_open is at most 2^30).
type fileRef struct {
	fd    int32
	valid bool // the zero fileRef holds no descriptor (0 is one)
}

// fdRef is the fileRef of a descriptor the caller opened.
func fdRef(fd int) fileRef { return fileRef{fd: int32(fd), valid: true} }

// isOpen reports whether f holds a descriptor.
func (f fileRef) isOpen() bool { return f.valid }

// descriptor is f's descriptor, -1 if it holds none.
func (f fileRef) descriptor() int {
	if !f.valid {
		return -1
	}
	return int(f.fd)
}

// readAt reads len(p) bytes from off with pread, as os.File.ReadAt does:
// short only at the end of the file (io.EOF) or on an error, which names
// path.
func (f fileRef) readAt(p []byte, off int64, path string) (int, error) {
	n, err := fileio.ReadAt(int(f.fd), p, off)
	if err != nil && err != io.EOF {
		err = &fs.PathError{Op: "read", Path: path, Err: err}
	}
	return n, err
}

// close closes the descriptor, once (the entry's last Release). It is not
// retried on EINTR: Linux has released the descriptor by then.
func (f fileRef) close() error { return syscall.Close(int(f.fd)) }

// stat describes what f has open, with one statx (as cheap as the fstat
// it replaces): beside what fstat says, statx tells whether the file is
// the root of a mount (mountRoot).
func (f fileRef) stat(path string) (fs.FileInfo, error) { return statFD(int(f.fd), path) }

// openRegularFile opens path for reading, as fileio.OpenFD does (a FIFO
// cannot block the open), with a bare descriptor. viaLink reports
// that path's last element is a symbolic link: it is opened with
// O_NOFOLLOW first, which costs nothing more for a file that is not one,
// and again without it when it is (ELOOP).
func openRegularFile(path string) (f fileRef, viaLink bool, err error) {
	flags := syscall.O_NOFOLLOW
	for {
		fd, err := fileio.OpenFD(path, flags)
		switch {
		case err == nil:
			return fdRef(fd), viaLink, nil
		case err == syscall.ELOOP && flags&syscall.O_NOFOLLOW != 0:
			// The last element is a link (or the links on the way are
			// too many, which the open that follows says again).
			flags &^= syscall.O_NOFOLLOW
			viaLink = true
			continue
		}
		return fileRef{}, viaLink, &fs.PathError{Op: "open", Path: path, Err: err}
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

// statFD describes the open descriptor fd of path: statx where the kernel
// has it (4.11), else fstat.
func statFD(fd int, path string) (*statInfo, error) {
	si := new(statInfo)
	if err := statFDInto(fd, path, si); err != nil {
		return nil, err
	}
	return si, nil
}

// statFDInto is statFD into the caller's si, which can then live on its
// stack: a reopen compares the answer and keeps none of it.
func statFDInto(fd int, path string, si *statInfo) error {
	*si = statInfo{path: path}
	for !noStatx.Load() {
		var stx unix.Statx_t
		err := statxFD(fd, &stx)
		switch {
		case err == nil:
			si.fromStatx(&stx)
			return nil
		case err == unix.EINTR:
			continue
		case err == unix.ENOSYS || err == unix.EPERM || err == unix.EINVAL:
			// No statx (Linux before 4.11, or a seccomp filter): fstat
			// from now on.
			noStatx.Store(true)
		default:
			return &fs.PathError{Op: "stat", Path: path, Err: err}
		}
	}
	for {
		err := syscall.Fstat(fd, &si.st)
		if err == nil {
			return nil
		}
		if err != syscall.EINTR {
			return &fs.PathError{Op: "stat", Path: path, Err: err}
		}
	}
}

// emptyPath is the "" that statx is given with AT_EMPTY_PATH: a static
// one, since unix.Statx would allocate its copy on every miss.
var emptyPath = [1]byte{0}

// statxMask is what the cache asks statx: what fstat says, and the mount
// (Linux 5.8; the mask of the answer says whether it came).
const statxMask = unix.STATX_BASIC_STATS | unix.STATX_MNT_ID

// statxFD is statx(fd, "", AT_EMPTY_PATH, statxMask).
func statxFD(fd int, stx *unix.Statx_t) error {
	_, _, e := unix.Syscall6(unix.SYS_STATX, uintptr(fd), uintptr(unsafe.Pointer(&emptyPath[0])),
		unix.AT_EMPTY_PATH|unix.AT_STATX_SYNC_AS_STAT, statxMask, uintptr(unsafe.Pointer(stx)), 0)
	if e != 0 {
		return e
	}
	return nil
}

// noStatx is set once statx was refused: descriptors are fstat'ed then,
// and mount roots are told by their device alone (mountRootOf).
var noStatx atomic.Bool

// fromStatx fills s from what statx said, as fstat would have. The
// fields of syscall.Stat_t differ in width between architectures, hence
// setNum.
func (s *statInfo) fromStatx(x *unix.Statx_t) {
	st := &s.st
	setNum(&st.Dev, unix.Mkdev(x.Dev_major, x.Dev_minor))
	setNum(&st.Ino, x.Ino)
	setNum(&st.Nlink, x.Nlink)
	setNum(&st.Mode, x.Mode)
	st.Uid, st.Gid = x.Uid, x.Gid
	setNum(&st.Rdev, unix.Mkdev(x.Rdev_major, x.Rdev_minor))
	setNum(&st.Size, x.Size)
	setNum(&st.Blksize, x.Blksize)
	setNum(&st.Blocks, x.Blocks)
	for _, t := range [...]struct {
		to   *syscall.Timespec
		from unix.StatxTimestamp
	}{{&st.Atim, x.Atime}, {&st.Mtim, x.Mtime}, {&st.Ctim, x.Ctime}} {
		setNum(&t.to.Sec, t.from.Sec)
		setNum(&t.to.Nsec, t.from.Nsec)
	}
	s.mount = mountOfStatx(x, st.Dev)
	if x.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		s.root = rootNo
		if x.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0 {
			s.root = rootYes
		}
	}
}

// mountOfStatx names the mount a statx answer describes a file on: its mount
// ID (Linux 5.8), or else its device, which tells filesystems apart but
// not two mounts of one. The two kinds never compare equal (the ID's has
// the top bit set); a process gets the same kind for every file.
func mountOfStatx[D integer](x *unix.Statx_t, dev D) uint64 {
	if x != nil && x.Mask&unix.STATX_MNT_ID != 0 {
		return x.Mnt_id | 1<<63
	}
	return uint64(dev)
}

// mountOf is the mountOfStatx of what info describes, 0 if unknown.
func mountOf(info fs.FileInfo) uint64 {
	switch s := info.(type) {
	case nil:
		return 0
	case *statInfo:
		return s.mount
	default:
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			return uint64(st.Dev)
		}
	}
	return 0
}

// mountOfPath is the mountOfStatx of the directory path names (through
// links), 0 if it cannot be told.
func mountOfPath(path string) uint64 {
	if !noStatx.Load() {
		var x unix.Statx_t
		if unix.Statx(unix.AT_FDCWD, path, unix.AT_STATX_SYNC_AS_STAT, statxMask, &x) == nil {
			return mountOfStatx(&x, unix.Mkdev(x.Dev_major, x.Dev_minor))
		}
	}
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return 0
	}
	return uint64(st.Dev)
}

// integer is every integer type a stat field has on some architecture.
type integer interface {
	~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64
}

// setNum stores v in *to, converted to *to's type.
func setNum[T, V integer](to *T, v V) { *to = T(v) }

// mountRootOf reports whether info, the description of the regular file
// at path, is the root of a mount: a file bind-mounted over another
// (`docker run -v ./env.js:/srv/www/env.js`, a Kubernetes subPath). Such
// a file is written through its source's name, in a directory that may
// not be watched, and its own directory gets no event for it. statx says
// so (Linux 5.8); before that, a file on another device than its
// directory is one, at the cost of a stat of the directory on each miss
// (a file bind-mounted from the same filesystem is not told then).
func mountRootOf(info fs.FileInfo, path string) bool {
	if info == nil || !info.Mode().IsRegular() {
		return false
	}
	var dev uint64
	switch s := info.(type) {
	case *statInfo:
		if s.root != rootUnknown {
			return s.root == rootYes
		}
		dev = s.st.Dev
	default:
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return false
		}
		dev = st.Dev
	}
	var dir syscall.Stat_t
	if err := syscall.Stat(filepath.Dir(path), &dir); err != nil {
		return false
	}
	return dir.Dev != dev
}

// mountRootState is what statx said about STATX_ATTR_MOUNT_ROOT.
type mountRootState uint8

const (
	rootUnknown mountRootState = iota // no statx, or a kernel before 5.8
	rootNo
	rootYes
)

// statInfo is the fs.FileInfo of one statx or fstat, as os.File.Stat
// makes it.
type statInfo struct {
	path  string
	st    syscall.Stat_t
	mount uint64 // mountOfStatx
	root  mountRootState
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
