//go:build !unix

package prewarm

import "os"

// openRead opens path for reading; there are no FIFOs to block on here.
func openRead(path string) (*os.File, error) { return os.Open(path) }

// openWarm opens the file at path if it is a regular file, with its size.
func openWarm(path string) (readFile, int64, error) {
	f, info, err := openRegular(path)
	if err != nil {
		return nil, 0, err
	}
	return f, info.Size(), nil
}

// fdLimit is 0 here: there is no fd table to watch.
func fdLimit() uint64 {
	return 0
}

// tableNearlyFull is false here: there is no fd table to watch.
func tableNearlyFull(uintptr, uint64) bool { return false }
