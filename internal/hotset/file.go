package hotset

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/flashserve/caddy-flash-serve/internal/fileio"
)

// Set is a snapshot as it is kept on disk, to survive a restart.
type Set struct {
	Version int       `json:"version"`
	Saved   time.Time `json:"saved"`
	Files   []File    `json:"files"`
}

const version = 1

// Path is where the hot set of the cache with the given settings key is
// kept under dir: one file per cache settings.
func Path(dir, cacheKey string) string {
	sum := fnv.New64a()
	sum.Write([]byte(cacheKey))
	return filepath.Join(dir, fmt.Sprintf("hotset-%016x.json", sum.Sum64()))
}

// Save writes a hot set atomically: to a temporary file in the same
// directory, synced, then renamed over the old one, so that a crash
// leaves either the old file or the new one, never a torn one.
func Save(path string, files []File) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(Set{Version: version, Saved: time.Now().UTC(), Files: files})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// maxSetBytes bounds a hot-set file: a set of the most files a snapshot
// holds (131,072) takes about 10 MB of JSON.
const maxSetBytes = 64 << 20

// Load reads a hot set. A missing file is an empty set; a corrupt or
// truncated one, one that is not a regular file (opened without waiting:
// a FIFO put in its place cannot hang a start) or one over maxSetBytes is
// an error the caller reports and ignores.
func Load(path string) (Set, error) {
	b, err := readSetFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Set{}, nil
	}
	if err != nil {
		return Set{}, err
	}
	var s Set
	if err := json.Unmarshal(b, &s); err != nil {
		return Set{}, fmt.Errorf("hot set %s is corrupt: %w", path, err)
	}
	if s.Version != version {
		return Set{}, fmt.Errorf("hot set %s has version %d, want %d", path, s.Version, version)
	}
	for _, f := range s.Files {
		if !filepath.IsAbs(f.Path) || f.Size < 0 {
			return Set{}, fmt.Errorf("hot set %s has an invalid entry %q", path, f.Path)
		}
	}
	return s, nil
}

func readSetFile(path string) ([]byte, error) {
	f, size, err := fileio.OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > maxSetBytes {
		return nil, fmt.Errorf("hot set %s is %d bytes, more than the %d a hot set takes", path, size, maxSetBytes)
	}
	b, err := io.ReadAll(io.NewSectionReader(f, 0, maxSetBytes+1))
	if err == nil && len(b) > maxSetBytes {
		err = fmt.Errorf("hot set %s is more than %d bytes", path, maxSetBytes)
	}
	return b, err
}
