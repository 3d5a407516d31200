package prewarm

import (
	"encoding/json"
	"errors"
	"io/fs"
	"path/filepath"

	"github.com/flashserve/caddy-flash-serve/internal/fileio"
	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// Residency is how much of one file is in the page cache.
type Residency struct {
	Path string
	Size int64
	// Known is false when this process cannot find out: mincore(2) reports
	// every page resident to a process that neither owns the file nor may
	// write it, and reading the pages to find out would bring them in.
	// Resident is 0 then, and its JSON null.
	Known    bool
	Resident int64
}

// MarshalJSON writes {"path", "size", "known", "resident_bytes"}, with
// resident_bytes null when the residency is not known.
func (r Residency) MarshalJSON() ([]byte, error) {
	var resident *int64
	if r.Known {
		resident = &r.Resident
	}
	return json.Marshal(struct {
		Path     string `json:"path"`
		Size     int64  `json:"size"`
		Known    bool   `json:"known"`
		Resident *int64 `json:"resident_bytes"`
	}{r.Path, r.Size, r.Known, resident})
}

// Percent is the resident share of the file, 100 for an empty file; 0
// when the residency is not known.
func (r Residency) Percent() float64 {
	if !r.Known {
		return 0
	}
	if r.Size == 0 {
		return 100
	}
	return 100 * float64(min(r.Resident, r.Size)) / float64(r.Size)
}

// Summary adds up the residencies of many files, keeping apart those whose
// residency this process cannot know (UnknownFiles, UnknownBytes).
type Summary struct {
	Files, Bytes int64
	// Resident counts the resident bytes of the files in KnownBytes.
	Resident, KnownBytes       int64
	UnknownFiles, UnknownBytes int64
}

// Summarize adds up residencies.
func Summarize(rs []Residency) Summary {
	var s Summary
	for _, r := range rs {
		s.Files++
		s.Bytes += r.Size
		if r.Known {
			s.Resident += r.Resident
			s.KnownBytes += r.Size
		} else {
			s.UnknownFiles++
			s.UnknownBytes += r.Size
		}
	}
	return s
}

// Known reports whether the residency of every file is known.
func (s Summary) Known() bool { return s.UnknownFiles == 0 }

// AnyKnown reports whether the residency of some file is known, or there
// is no file at all: Resident and Percent then mean something.
func (s Summary) AnyKnown() bool { return s.Files == 0 || s.UnknownFiles < s.Files }

// Percent is the resident share of the bytes whose residency is known:
// 100 when those are empty files or none, 0 when nothing is known.
func (s Summary) Percent() float64 {
	if !s.AnyKnown() {
		return 0
	}
	if s.KnownBytes == 0 {
		return 100
	}
	return 100 * float64(min(s.Resident, s.KnownBytes)) / float64(s.KnownBytes)
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
	f, err := fileio.OpenRead(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pagecache.Evict(int(f.Fd()))
}

// Residencies reports every regular file under the paths.
func Residencies(paths []string) ([]Residency, error) {
	var out []Residency
	for _, p := range paths {
		err := filepath.WalkDir(p, func(f string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.Type().IsRegular() {
				return nil
			}
			r, err := FileResidency(f)
			if err != nil {
				return err
			}
			out = append(out, r)
			return nil
		})
		if err != nil {
			return out, err
		}
	}
	return out, nil
}
