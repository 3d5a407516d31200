package prewarm

import (
	"errors"
	"io/fs"
	"os"

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// openRegular opens the file at path if it is a regular file, which it
// checks with fstat on what it opened (openRead does not block on a FIFO):
// a stat by name before the open would leave a window for another file
// to take the path. Anything else is closed again and skipped
// (errSkipped), as is a file that is gone.
func openRegular(path string) (*os.File, os.FileInfo, error) {
	f, err := openRead(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, errSkipped
	}
	if err != nil {
		return nil, nil, err
	}
	info, err := f.Stat()
	if err == nil && !info.Mode().IsRegular() {
		err = errSkipped
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, info, nil
}

// FileResidency asks mincore(2) which pages of the file are resident,
// where mincore tells this process the truth (pagecache.Trusted); for
// other files it reports the residency as not known. Where the page cache
// cannot be asked (not Linux) it fails with an error wrapping
// errors.ErrUnsupported.
func FileResidency(path string) (Residency, error) {
	r := Residency{Path: path}
	f, info, err := openRegular(path)
	if errors.Is(err, errSkipped) {
		return r, &fs.PathError{Op: "open", Path: path, Err: errSkipped}
	}
	if err != nil {
		return r, err
	}
	defer f.Close()
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
