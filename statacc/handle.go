package statacc

import (
	"io"
	"io/fs"
	"os"
)

// handle is the open file of a regular-file entry, read at explicit
// offsets so that any number of concurrent responses share it, and closed
// by the entry's last Release: an *os.File, or on Linux a bare descriptor
// (rawFile), which costs a miss no poller registration and no finalizer.
type handle interface {
	io.ReaderAt
	Close() error
}

// statOSFile describes what an *os.File handle has open.
func statOSFile(h handle) (fs.FileInfo, error) { return osFileOf(h).Stat() }

// osFileOf is the *os.File of a handle that is one.
func osFileOf(h handle) *os.File { f, _ := h.(*os.File); return f }

// fromOSFile is the handle of f, nil (not a nil *os.File) if f is.
func fromOSFile(f *os.File) handle {
	if f == nil {
		return nil
	}
	return f
}
