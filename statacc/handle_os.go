//go:build !linux || flashserve_portable

package statacc

import (
	"io/fs"
	"os"

	"github.com/flashserve/caddy-flash-serve/internal/fileio"
)

// fileRef is the open file of a regular-file entry: an *os.File, with its
// descriptor read once, so that Fd (which may make a system call) is
// never called again. The zero fileRef holds none.
type fileRef struct {
	f  *os.File
	fd int32 // -1 where there is none (fileFD)
}

// osFileRef is the fileRef of f, which holds none if f is nil.
func osFileRef(f *os.File) fileRef {
	if f == nil {
		return fileRef{}
	}
	return fileRef{f: f, fd: int32(fileFD(f))}
}

// isOpen reports whether f holds a file.
func (f fileRef) isOpen() bool { return f.f != nil }

// descriptor is f's descriptor, -1 if it holds none or has none.
func (f fileRef) descriptor() int {
	if f.f == nil {
		return -1
	}
	return int(f.fd)
}

// readAt is os.File.ReadAt; its errors name the file's path already.
func (f fileRef) readAt(p []byte, off int64, _ string) (int, error) { return f.f.ReadAt(p, off) }

// close closes the file, once (the entry's last Release).
func (f fileRef) close() error { return f.f.Close() }

// stat describes what f has open.
func (f fileRef) stat(string) (fs.FileInfo, error) { return f.f.Stat() }

// openRegularFile opens path for reading (fileio.OpenRead).
// Without inotify no entry is trusted for longer than a second, links or
// not, so it does not tell whether path's last element is a link.
func openRegularFile(path string) (fileRef, bool, error) {
	f, err := fileio.OpenRead(path)
	if err != nil {
		return fileRef{}, false, err
	}
	return osFileRef(f), false, nil
}

// multiplyLinked is false without inotify: see openRegularFile.
func multiplyLinked(fs.FileInfo) bool { return false }

// mountRootOf is false without inotify: every entry is trusted for a
// second at most anyway.
func mountRootOf(fs.FileInfo, string) bool { return false }

// mountOf and mountOfPath tell no mount here: every descriptor is kept
// as any other (Cache.onOtherMount).
func mountOf(fs.FileInfo) uint64 { return 0 }

func mountOfPath(string) uint64 { return 0 }
