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
