//go:build !linux || flashserve_portable

package pagecache

import "io/fs"

// Trusted is true where nothing asks mincore(2): without the Linux engines
// no body is probed for residency.
func Trusted(int, fs.FileInfo) bool { return true }

// residentPrefix cannot see the page cache here.
func residentPrefix(int, int64, int64) (int64, error) { return 0, errUnsupported }

// allCached cannot see the page cache here.
func allCached(int, int64, int64) bool { return false }

// mincore cannot see the page cache here.
func mincore(int, int64, int64, []byte) ([]byte, int64, error) { return nil, 0, errUnsupported }

// Count cannot see the page cache here.
func Count(int, int64) (int64, error) { return 0, errUnsupported }

// ReadNoWait cannot read without waiting here.
func ReadNoWait(int, []byte, int64) (int, error) { return 0, errUnsupported }

// ReadNoWaitMetDisk cannot read without waiting here.
func ReadNoWaitMetDisk(int, []byte, int64) (int, bool, error) { return 0, false, errUnsupported }

// threadReads counts nothing here: the no-wait reads fail anyway.
type threadReads struct{}

func blocksReadIn() threadReads { return threadReads{} }

// Prefetch does nothing here: the reads that follow bring the data in.
func Prefetch(int, int64) {}

// PrefetchRange does nothing here.
func PrefetchRange(int, int64, int64) {}

// Evict cannot drop pages here.
func Evict(int) error { return errUnsupported }

// InMemoryFS is false where the page cache is not asked.
func InMemoryFS(int, fs.FileInfo) bool { return false }
