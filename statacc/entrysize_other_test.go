//go:build !linux || flashserve_portable

package statacc

// entryBound is the most an Entry may take here (TestEntryLayout): the
// *os.File and its descriptor (fileRef, 16 bytes) beside the meta pointer
// and the counts fill the 32-byte size class.
const entryBound = 32
