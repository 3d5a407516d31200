package prewarm

import (
	"github.com/flashserve/caddy-flash-serve/internal/hotset"
)

// HotTargets reads the hot set saved at path and returns its files as
// warm-up targets, hottest first, with the sizes they had when it was
// saved: a Warmer stops a file at its end and skips a file that is gone,
// and no file is looked at before the warm-up reaches it (a stat of each
// of 100,000 files on a cold disk would delay the first read by
// seconds). A missing hot set is no target and no error; a corrupt one is
// an error the caller reports and ignores.
func HotTargets(path string) ([]Target, error) {
	s, err := hotset.Load(path)
	if err != nil {
		return nil, err
	}
	out := make([]Target, 0, len(s.Files))
	for _, f := range s.Files {
		out = append(out, Target{Path: f.Path, Size: f.Size})
	}
	return out, nil
}
