//go:build !linux

package statacc

import "io/fs"

// noBlockDevice is false where io_uring is not used.
func noBlockDevice(fs.FileInfo) bool { return false }
