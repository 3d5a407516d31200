// Package fileio holds the file calls that statacc, prewarm, transmit and
// the handler all make, each written once: opening for reading without
// blocking on a FIFO, reading at an offset in full, the size of the fd
// table and telling it full, and telling a filesystem without a block
// device.
package fileio

import (
	"errors"
	"io"
	"syscall"
)

// File is an open file read at explicit offsets (OpenRegular).
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
