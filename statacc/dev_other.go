//go:build !linux

package statacc

import "io/fs"

// fileIdentity is unknown where io_uring is not used.
func fileIdentity(fs.FileInfo) (noBlockDevice bool, id uint64) { return false, 0 }
