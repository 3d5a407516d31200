//go:build !linux || flashserve_portable

package statacc

import (
	"io/fs"

	"github.com/flashserve/caddy-flash-serve/internal/fileio"
)

// openRegularFile opens path for reading (fileio.OpenRead) as a handle.
// Without inotify no entry is trusted for longer than a second, links or
// not, so it does not tell whether path's last element is a link.
func openRegularFile(path string) (h handle, viaLink bool, err error) {
	f, err := fileio.OpenRead(path)
	if err != nil {
		return nil, false, err
	}
	return f, false, nil
}

// multiplyLinked is false without inotify: see openRegularFile.
func multiplyLinked(fs.FileInfo) bool { return false }

// mountRootOf is false without inotify: every entry is trusted for a
// second at most anyway.
func mountRootOf(fs.FileInfo, string) bool { return false }

// mountOf and mountOfPath tell no mount here: every descriptor is kept
// as any other (Cache.onOtherMount).
func mountOf(fs.FileInfo) uint64 { return 0 }

func mountOfPath(string) uint64 { return 0 }

// statHandle describes what h has open.
func statHandle(h handle) (fs.FileInfo, error) { return statOSFile(h) }

// handleFD is the descriptor of a handle, -1 where it has none.
func handleFD(h handle) int { return fileFD(osFileOf(h)) }
