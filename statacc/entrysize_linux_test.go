//go:build linux && !flashserve_portable

package statacc

// entryBound is the most an Entry may take here (TestEntryLayout): a bare
// descriptor (fileRef, 8 bytes) beside the meta pointer and the counts
// fills the 24-byte size class, which a reopened descriptor's Entry,
// allocated alone, takes.
const entryBound = 24

// fileEntryOwnBound is the most Go heap a cached file entry may allocate
// besides its path (TestHeapPerEntry): 400 B with the bench's 64-byte
// path object (issue #33).
const fileEntryOwnBound = 336
