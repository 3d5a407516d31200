//go:build !linux || flashserve_portable

package statacc

// watchMounts does nothing here: the mount table is watched on Linux
// only (mounts_linux.go); elsewhere every entry is trusted for a second
// at most, mounts included.
func watchMounts(*Cache) {}

func unwatchMounts(*Cache) {}
