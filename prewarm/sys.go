package prewarm

import (
	"errors"
	"io/fs"
	"os"

	"github.com/flashserve/caddy-flash-serve/internal/fileio"
	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// openWarm opens the file at path if it is still a regular file, with its
// size; one that is gone or is something else now is errSkipped.
func openWarm(path string) (fileio.File, int64, error) {
	f, size, err := fileio.OpenRegular(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fileio.ErrNotRegular) {
		return nil, 0, errSkipped
	}
	return f, size, err
}

// tableNearlyFull reports whether a descriptor numbered fd, just opened,
// is in the last eighth of an fd table of limit descriptors (0 for
// unknown): the kernel hands out the lowest free number, so the table is
// then mostly taken, and a warm-up leaves the rest to the server's
// connections and its cache. Holes below make it an underestimate: an
// open that finds the table full is the other signal (fdGate).
func tableNearlyFull(fd uintptr, limit uint64) bool {
	return limit > 0 && uint64(fd)+limit/8 >= limit
}

// FileResidency asks mincore(2) which pages of the file are resident,
// where mincore tells this process the truth (pagecache.Trusted); for
// other files it reports the residency as not known. Where the page cache
// cannot be asked (not Linux) it fails with an error wrapping
// errors.ErrUnsupported.
func FileResidency(path string) (Residency, error) {
	r := Residency{Path: path}
	f, err := fileio.OpenRead(path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, &fs.PathError{Op: "open", Path: path, Err: errSkipped}
	}
	if err != nil {
		return r, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return r, err
	}
	if !info.Mode().IsRegular() {
		return r, &fs.PathError{Op: "open", Path: path, Err: errSkipped}
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
