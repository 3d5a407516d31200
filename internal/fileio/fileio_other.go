//go:build !unix

package fileio

import (
	"io/fs"
	"os"
)

// OpenRead opens path for reading: there are no FIFOs to block on here.
func OpenRead(path string) (*os.File, error) { return os.Open(path) }

// OpenRegular opens path and returns it with its size if it is a regular
// file; anything else is closed again (ErrNotRegular).
func OpenRegular(path string) (File, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	info, err := f.Stat()
	if err == nil && !info.Mode().IsRegular() {
		err = &fs.PathError{Op: "open", Path: path, Err: ErrNotRegular}
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, info.Size(), nil
}

// FDLimit is 0 here: there is no fd table to watch.
func FDLimit() uint64 { return 0 }
