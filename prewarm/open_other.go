//go:build !unix

package prewarm

import "os"

// openRead opens path for reading; there are no FIFOs to block on here.
func openRead(path string) (*os.File, error) { return os.Open(path) }

// tableNearlyFull is false here: there is no fd table to watch.
func tableNearlyFull(fd uintptr) bool { return false }
