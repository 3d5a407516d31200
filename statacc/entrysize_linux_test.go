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

// negativeEntryOwnBound is the most Go heap a negative entry may allocate
// besides its path's bytes (TestHeapPerEntry): 120 B with an 18-byte path.
// It measures about 90 B with the test's 50-byte paths.
const negativeEntryOwnBound = 102
