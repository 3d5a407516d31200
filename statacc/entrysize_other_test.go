//go:build !linux || flashserve_portable

package statacc

// entryBound is the most an Entry may take here (TestEntryLayout): the
// *os.File and its descriptor (fileRef, 16 bytes) beside the meta pointer
// and the counts fill the 32-byte size class.
const entryBound = 32

// fileEntryOwnBound is the most Go heap a cached file entry may allocate
// besides its path (TestHeapPerEntry): Linux's 336 B, plus the *os.File
// an entry holds here, which allocates about 96 B of its own (the File
// and the file it points at) that a bare descriptor does not; measured
// 396 B with -tags flashserve_portable, which has no name index.
const fileEntryOwnBound = 336 + 96
