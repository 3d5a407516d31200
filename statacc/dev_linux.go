//go:build linux

package statacc

import (
	"io/fs"
	"math/bits"
	"syscall"

	"github.com/flashserve/caddy-flash-serve/internal/fileio"
)

// fileIdentity reports whether info's device number has major 0 (an
// anonymous device, as FUSE, NFS and tmpfs use) and the file's device
// and inode mixed into one nonzero number, in which no bit of either is
// lost: devices numbered one apart (loop0 and loop1, two tmpfs mounts) with
// the same inode numbers give other ids (meta.sameAs).
func fileIdentity(info fs.FileInfo) (noBlockDevice bool, id uint64) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return false, 0
	}
	return fileio.NoBlockDevice(info), statIdentity(st)
}

// statIdentity is fileIdentity's id of what st describes.
func statIdentity(st *syscall.Stat_t) uint64 {
	id := st.Ino*0x9E3779B97F4A7C15 ^ bits.RotateLeft64(uint64(st.Dev), 32)
	if id == 0 {
		id = 1
	}
	return id
}
