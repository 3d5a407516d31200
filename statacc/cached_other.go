//go:build !linux || flashserve_portable

package statacc

import "io/fs"

// openCached has no cached-only lookup here: every miss holds a slot.
func openCached(lookupKey, string) (fs.FileInfo, handle, error, bool) { return nil, nil, nil, false }
