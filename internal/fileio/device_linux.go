//go:build linux

package fileio

import (
	"io/fs"
	"syscall"

	"golang.org/x/sys/unix"
)

// NoBlockDevice reports whether the file info describes is on a
// filesystem without a block device: its device number's major is 0 (an
// anonymous device: FUSE, NFS, CIFS, tmpfs, overlayfs, btrfs).
func NoBlockDevice(info fs.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && unix.Major(st.Dev) == 0
}

// NoBlockDeviceFD is NoBlockDevice of the open file fd, with one fstat;
// false if that fails.
func NoBlockDeviceFD(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && unix.Major(st.Dev) == 0
}
