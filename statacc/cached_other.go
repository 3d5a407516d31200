//go:build !linux || flashserve_portable

package statacc

import "io/fs"

// openCached has no cached-only lookup here: every miss holds a slot.
func openCached(lookupKey, string) (fs.FileInfo, fileRef, error, bool) {
	return nil, fileRef{}, nil, false
}

// openSameCached has nothing to reopen here without a lookup: a reopen
// is a miss.
func openSameCached(*meta, string) fileRef { return fileRef{} }
