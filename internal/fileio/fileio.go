// Package fileio holds the file system calls that statacc, prewarm,
// transmit and the handler all make: opening a file for reading without
// blocking on a FIFO, reading it whole at an offset, and telling a full
// fd table, the size of that table and a filesystem without a block
// device. Each is written once here, with a fallback where the system
// lacks it.
package fileio

import (
	"errors"
	"io"
	"syscall"
)

// File is an open file read at explicit offsets: a bare descriptor on
// Unix, an *os.File elsewhere.
type File interface {
	io.ReaderAt
	io.Closer
	Fd() uintptr
}

// ErrNotRegular is why OpenRegular refused what it opened.
var ErrNotRegular = errors.New("not a regular file")

// IsFDExhaustion reports whether err says the fd table is full, the
// process's (EMFILE) or the system's (ENFILE).
func IsFDExhaustion(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}
