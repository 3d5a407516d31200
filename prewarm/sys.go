package prewarm

import (
	"os"

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// openForWarming opens a file to bring its first n bytes into the page
// cache: a prefetch starts the readahead for the whole span (with the
// kernel's own readahead off for this descriptor, so that exactly the
// budgeted pages are read, no more); the reads of readPrefix make sure it
// has landed before the file counts as warm.
func openForWarming(path string, n int64) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	pagecache.Prefetch(int(f.Fd()), n)
	return f, nil
}

// FileResidency asks mincore(2) which pages of the file are resident,
// where mincore tells this process the truth (pagecache.Trusted); for
// other files it reports the residency as not known. Where the page cache
// cannot be asked (not Linux) it fails with an error wrapping
// errors.ErrUnsupported.
func FileResidency(path string) (Residency, error) {
	r := Residency{Path: path}
	f, err := os.Open(path)
	if err != nil {
		return r, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return r, err
	}
	r.Size = info.Size()
	fd := int(f.Fd())
	if !pagecache.Trusted(fd, info) {
		return r, nil
	}
	n, err := pagecache.Count(fd, r.Size)
	if err != nil {
		return r, err
	}
	r.Known, r.Resident = true, n
	return r, nil
}

// Evict drops a file from the page cache (fadvise DONTNEED), for tests and
// benchmarks of a cold start.
func Evict(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pagecache.Evict(int(f.Fd()))
}
