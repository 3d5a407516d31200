//go:build !linux || flashserve_portable

package statacc

import (
	"io/fs"
	"os"
)

// openConfined is the lstat walk outside Linux: see SymlinksBeneath.
func openConfined(root, path string, mode Symlinks, want openKinds) (fs.FileInfo, *os.File, error) {
	return openWalked(root, path, mode, want)
}

// openConfinedRegular is the cache's confined lookup (Cache.open) outside
// Linux: openConfined for a regular file, and a directory the server may
// not read refused as file_server refuses it (unreadableDir).
func openConfinedRegular(root, path string, mode Symlinks) (fs.FileInfo, fileRef, bool, error) {
	info, f, viaLink, err := openWalkedLinked(root, path, mode, openRegular)
	return info, osFileRef(f), viaLink, err
}
