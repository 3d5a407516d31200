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
// not read refused as file_server refuses it (unreadableDir). It does not
// tell links: without inotify no entry is trusted for longer than a
// second.
func openConfinedRegular(root, path string, mode Symlinks) (fs.FileInfo, *os.File, bool, error) {
	info, f, err := openConfined(root, path, mode, openRegular)
	if err == nil && f == nil && info != nil && info.IsDir() {
		d, derr := openFile(path)
		if derr != nil && unreadableDir(info, derr) {
			return nil, nil, false, derr
		}
		if d != nil {
			d.Close()
		}
	}
	return info, f, false, err
}
