//go:build !linux || flashserve_portable

package pagecache

import (
	"errors"
	"fmt"
	"io/fs"
)

var errUnsupported = fmt.Errorf("page-cache residency is only known on Linux: %w", errors.ErrUnsupported)

// Without the Linux calls no body is probed for residency: every file is
// Trusted (nothing asks mincore), the probes and no-wait reads fail with
// errUnsupported, the advice does nothing (the reads that follow bring
// the data in) and no filesystem is known to be in memory.

func Trusted(int, fs.FileInfo) bool                            { return true }
func residentPrefix(int, int64, int64) (int64, error)          { return 0, errUnsupported }
func allCached(int, int64, int64) bool                         { return false }
func mincore(int, int64, int64, []byte) ([]byte, int64, error) { return nil, 0, errUnsupported }
func Count(int, int64) (int64, error)                          { return 0, errUnsupported }
func ReadNoWait(int, []byte, int64) (int, error)               { return 0, errUnsupported }
func WholeCached(int, int64, bool) (bool, bool)                { return false, false }
func ReadNoWaitMetDisk(int, []byte, int64) (int, bool, error)  { return 0, false, errUnsupported }
func Prefetch(int, int64)                                      {}
func PrefetchRange(int, int64, int64)                          {}
func Evict(int) error                                          { return errUnsupported }
func InMemoryFS(int, fs.FileInfo) bool                         { return false }

// threadReads counts nothing here: the no-wait reads fail anyway.
type threadReads struct{}

func blocksReadIn() threadReads { return threadReads{} }
