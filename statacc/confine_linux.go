//go:build linux && !flashserve_portable

package statacc

import (
	"errors"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"github.com/flashserve/caddy-flash-serve/internal/fileio"
)

// openConfined resolves path below root with openat2, so that the kernel
// refuses a link that leaves root (beneath) or any link (deny) at the
// moment of the open: a link swapped in after a check cannot win.
func openConfined(root, path string, mode Symlinks, want openKinds) (fs.FileInfo, *os.File, error) {
	info, f, _, err := openConfinedLinked(root, path, mode, want)
	return info, f, err
}

// openConfinedRegular is the cache's confined lookup: a regular file
// opened as a bare descriptor (fileRef), anything else described;
// viaLink: the last element is a link.
func openConfinedRegular(root, path string, mode Symlinks) (fs.FileInfo, fileRef, bool, error) {
	info, fd, viaLink, walk, err := openConfinedFD(root, path, mode, openRegular)
	if walk {
		// No openat2: the lstat walk, and the open of the file it checked.
		var open bool
		info, viaLink, open, err = describeWalked(root, path, mode, openRegular)
		if !open {
			return info, fileRef{}, viaLink, err
		}
		if fd, err = fileio.OpenFD(path, 0); err != nil {
			return info, fileRef{}, viaLink, &fs.PathError{Op: "open", Path: path, Err: err}
		}
	}
	if fd < 0 {
		return info, fileRef{}, viaLink, err
	}
	return info, fdRef(fd), viaLink, nil
}

// openConfinedLinked is openConfined that also reports, for want
// openRegular, whether the path's last element is a link.
func openConfinedLinked(root, path string, mode Symlinks, want openKinds) (fs.FileInfo, *os.File, bool, error) {
	info, fd, viaLink, walk, err := openConfinedFD(root, path, mode, want)
	if walk {
		return openWalkedLinked(root, path, mode, want)
	}
	if fd < 0 {
		return info, nil, viaLink, err
	}
	return info, os.NewFile(uintptr(fd), path), viaLink, nil
}

// openConfinedFD is openConfinedLinked with openat2, the file opened as a
// bare descriptor (-1 if none is). walk: openat2 is not there (Linux
// before 5.6, or a seccomp filter without it), the caller walks instead.
func openConfinedFD(root, path string, mode Symlinks, want openKinds) (_ fs.FileInfo, fd int, viaLink, walk bool, _ error) {
	rel, ok := relativeTo(root, path)
	if !ok {
		return nil, -1, false, false, &fs.PathError{Op: "openat2", Path: path, Err: errEscape}
	}
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, -1, false, false, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rootFD)
	how := unix.OpenHow{Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS}
	if mode == SymlinksDeny {
		how.Resolve |= unix.RESOLVE_NO_SYMLINKS
	}
	var openErr error // the regular open's, for a directory it could not read
	if want == openRegular {
		// The cache's lookup: open first and fstat, as the unconfined
		// one (O_NONBLOCK: a FIFO cannot block). What cannot be opened
		// (an unreadable directory, a socket) is described from O_PATH.
		// Beneath, the last element is tried with O_NOFOLLOW, to tell
		// a link (ELOOP).
		how.Flags = fileio.ReadFlags
		if mode == SymlinksBeneath {
			how.Flags |= unix.O_NOFOLLOW
		}
		fd, err := unix.Openat2(rootFD, rel, &how)
		if errors.Is(err, unix.ELOOP) && how.Flags&unix.O_NOFOLLOW != 0 {
			viaLink = true
			how.Flags &^= unix.O_NOFOLLOW
			fd, err = unix.Openat2(rootFD, rel, &how)
		}
		switch {
		case err == nil:
			// statx rather than fstat: it also tells a mount root.
			info, err := statFD(fd, path)
			if err != nil {
				unix.Close(fd)
				return nil, -1, viaLink, false, err
			}
			if !info.Mode().IsRegular() {
				unix.Close(fd)
				return info, -1, viaLink, false, nil
			}
			return info, fd, viaLink, false, nil
		case errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) && !openat2Works():
			return nil, -1, false, true, nil
		case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EXDEV) ||
			errors.Is(err, unix.ELOOP) || fileio.IsFDExhaustion(err):
			return nil, -1, viaLink, false, confinedError(path, err, mode)
		}
		openErr = &fs.PathError{Op: "openat2", Path: path, Err: err}
	}
	// O_PATH opens nothing: a device or a FIFO is only stat'ed.
	how.Flags = unix.O_PATH | unix.O_CLOEXEC
	fd, err = unix.Openat2(rootFD, rel, &how)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) && !openat2Works() {
		// Linux before 5.6, or a seccomp filter without openat2.
		return nil, -1, false, true, nil
	}
	if err != nil {
		return nil, -1, viaLink, false, confinedError(path, err, mode)
	}
	// Stat the descriptor: a second lookup by name would follow
	// links the confinement refuses.
	pathFile := os.NewFile(uintptr(fd), path)
	info, err := pathFile.Stat()
	pathFile.Close()
	if err != nil {
		return nil, -1, viaLink, false, err
	}
	if openErr != nil && unreadableDir(info, openErr) {
		return nil, -1, viaLink, false, openErr
	}
	if !want.has(info) {
		return info, -1, viaLink, false, nil // not a body: the info is all we need
	}
	how.Flags = fileio.ReadFlags
	if info.IsDir() {
		how.Flags |= unix.O_DIRECTORY
	}
	fd, err = unix.Openat2(rootFD, rel, &how)
	if err != nil {
		return nil, -1, viaLink, false, confinedError(path, err, mode)
	}
	if info, err = statFD(fd, path); err != nil {
		unix.Close(fd)
		return nil, -1, viaLink, false, err
	}
	return info, fd, viaLink, false, nil
}

func confinedError(path string, err error, mode Symlinks) error {
	switch {
	case errors.Is(err, unix.EXDEV):
		return &fs.PathError{Op: "openat2", Path: path, Err: errEscape}
	case errors.Is(err, unix.ELOOP) && mode == SymlinksDeny:
		return &fs.PathError{Op: "openat2", Path: path, Err: errSymlink}
	}
	return &fs.PathError{Op: "openat2", Path: path, Err: err}
}

// openat2Works tells an EPERM of a seccomp filter from one about the
// file: it opens "/" with openat2.
func openat2Works() bool {
	fd, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC})
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}
