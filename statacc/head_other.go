//go:build !linux || flashserve_portable

package statacc

import (
	"io"
	"os"
)

// readHead reads the head of a file.
func readHead(f *os.File, head []byte) (int, error) {
	n, err := f.ReadAt(head, 0)
	if err == io.EOF && n == len(head) {
		err = nil
	}
	return n, err
}
