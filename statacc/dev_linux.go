//go:build linux

package statacc

import (
	"io/fs"
	"syscall"

	"golang.org/x/sys/unix"
)

// noBlockDevice reports whether info's device number has major 0: an
// anonymous device, as FUSE, NFS and tmpfs use.
func noBlockDevice(info fs.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && unix.Major(st.Dev) == 0
}
