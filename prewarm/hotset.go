package prewarm

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/flashserve/caddy-flash-serve/statacc"
)

// HotSet is the snapshot of the most requested files that survives a
// restart.
type HotSet struct {
	Version int               `json:"version"`
	Saved   time.Time         `json:"saved"`
	Files   []statacc.HotFile `json:"files"`
}

const hotSetVersion = 1

// SaveHotSet writes the hot set atomically: to a temporary file in the same
// directory, synced, then renamed over the old one, so that a crash leaves
// either the old file or the new one, never a torn one.
func SaveHotSet(path string, files []statacc.HotFile) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(HotSet{Version: hotSetVersion, Saved: time.Now().UTC(), Files: files})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
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

// LoadHotSet reads a hot set. A missing file is an empty set; a corrupt
// or truncated one is an error the caller reports and ignores.
func LoadHotSet(path string) (HotSet, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return HotSet{}, nil
	}
	if err != nil {
		return HotSet{}, err
	}
	var hs HotSet
	if err := json.Unmarshal(b, &hs); err != nil {
		return HotSet{}, fmt.Errorf("hot set %s is corrupt: %v", path, err)
	}
	if hs.Version != hotSetVersion {
		return HotSet{}, fmt.Errorf("hot set %s has version %d, want %d", path, hs.Version, hotSetVersion)
	}
	for _, f := range hs.Files {
		if !filepath.IsAbs(f.Path) || f.Size < 0 {
			return HotSet{}, fmt.Errorf("hot set %s has an invalid entry %q", path, f.Path)
		}
	}
	return hs, nil
}

// Targets turns a hot set into warm-up targets, with today's sizes;
// files that are gone are skipped.
func (hs HotSet) Targets() []Target {
	var out []Target
	for _, f := range hs.Files {
		if info, err := os.Stat(f.Path); err == nil && info.Mode().IsRegular() {
			out = append(out, Target{Path: f.Path, Size: info.Size()})
		}
	}
	return out
}
