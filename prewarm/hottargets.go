package prewarm

import (
	"os"

	"github.com/flashserve/caddy-flash-serve/internal/hotset"
)

// HotTargets reads the hot set saved at path and returns its files as
// warm-up targets, hottest first, with today's sizes; files that are gone
// are skipped. A missing file is no target and no error; a corrupt one is
// an error the caller reports and ignores.
func HotTargets(path string) ([]Target, error) {
	s, err := hotset.Load(path)
	if err != nil {
		return nil, err
	}
	var out []Target
	for _, f := range s.Files {
		if info, err := os.Stat(f.Path); err == nil && info.Mode().IsRegular() {
			out = append(out, Target{Path: f.Path, Size: info.Size()})
		}
	}
	return out, nil
}
