//go:build !linux || flashserve_portable

package statacc

import (
	"io/fs"
	"os"
)

// openConfined is the lstat walk outside Linux: see SymlinksBeneath.
func openConfined(root, path string, mode Symlinks) (fs.FileInfo, *os.File, error) {
	return openWalked(root, path, mode)
}
