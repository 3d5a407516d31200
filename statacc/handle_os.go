//go:build !linux || flashserve_portable

package statacc

import "io/fs"

// openRegularFile opens path for reading (openFile) as a handle.
func openRegularFile(path string) (handle, error) {
	f, err := openFile(path)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// statHandle describes what h has open.
func statHandle(h handle) (fs.FileInfo, error) { return statOSFile(h) }

// handleFD is the descriptor of a handle, -1 where it has none.
func handleFD(h handle) int { return fileFD(osFileOf(h)) }
