//go:build linux

package statacc

import (
	"io/fs"
	"syscall"

	"github.com/flashserve/caddy-flash-serve/internal/fileio"
)

// fileIdentity reports whether info's device number has major 0 (an
// anonymous device, as FUSE, NFS and tmpfs use) and the file's device
// and inode mixed into one nonzero number.
func fileIdentity(info fs.FileInfo) (noBlockDevice bool, id uint64) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return false, 0
	}
	return fileio.NoBlockDevice(info), (st.Ino*0x9E3779B97F4A7C15 ^ st.Dev) | 1
}
