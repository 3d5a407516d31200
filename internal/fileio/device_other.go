//go:build !linux

package fileio

import "io/fs"

// NoBlockDevice is false here: only Linux's device numbers say it.
func NoBlockDevice(fs.FileInfo) bool { return false }

// NoBlockDeviceFD is false here, as NoBlockDevice.
func NoBlockDeviceFD(int) bool { return false }
