//go:build unix

package prewarm

import (
	"os"
	"syscall"
)

// openRead opens path for reading without waiting: with O_NONBLOCK a FIFO
// (or a device) that took the place of a regular file opens at once
// instead of blocking the thread until a writer comes; the caller checks
// with fstat what it opened. On a regular file O_NONBLOCK changes nothing.
func openRead(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
}
