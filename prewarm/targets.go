package prewarm

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/flashserve/caddy-flash-serve/internal/hotset"
)

// Target is one file to warm: Size bytes of it from the start, or fewer
// if the budget runs out.
type Target struct {
	Path string
	Size int64
}

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

// Expand turns patterns into files under root: "*" is the whole tree, a
// directory is everything below it, and anything else is a glob relative
// to root. A pattern cannot leave root.
func Expand(root string, patterns []string) ([]Target, error) {
	return expand(context.Background(), root, patterns, nil)
}

// Expand expands patterns as the package's Expand does, taking turns with
// the requests as the reads do (Busy): a large tree's stats cost the core
// serving more than its reads. It returns ctx's error if ctx ends first.
func (w *Warmer) Expand(ctx context.Context, root string, patterns []string) ([]Target, error) {
	return expand(ctx, root, patterns, w.newYielder())
}

// walkTurn is how many files a walk stats in one turn.
const walkTurn = 64

func expand(ctx context.Context, root string, patterns []string, y *yielder) ([]Target, error) {
	seen := map[string]bool{}
	var out []Target
	// While requests are served, the walk holds the lane and counts the
	// thread's CPU for walkTurn files at a time (nextFile), then pauses
	// and gives the lane back (endTurn).
	var files int
	endTurn := noRelease
	defer func() { endTurn() }()
	nextFile := func() error {
		if y != nil && files%walkTurn == 0 {
			endTurn()
			endTurn = noRelease
			if err := ctx.Err(); err != nil {
				return err // no turn after the end: a pause would be for nothing
			}
			release, held, err := y.wait(ctx, 0)
			if err != nil {
				return err
			}
			pay := y.charge(ctx, held)
			endTurn = func() { pay(); release() }
		}
		files++
		return ctx.Err()
	}
	add := func(p string, info fs.FileInfo) {
		if info.Mode().IsRegular() && !seen[p] {
			seen[p] = true
			out = append(out, Target{Path: p, Size: info.Size()})
		}
	}
	walk := func(dir string) error {
		return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return ctx.Err() // unreadable parts are skipped, not fatal
			}
			if d.Type().IsRegular() {
				if err := nextFile(); err != nil {
					return err
				}
				if info, err := d.Info(); err == nil {
					add(p, info)
				}
			}
			return nil
		})
	}
	for _, pat := range patterns {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if pat == "*" || pat == "/" || pat == "." {
			if err := walk(root); err != nil {
				return nil, err
			}
			continue
		}
		rel := filepath.Clean("/" + filepath.ToSlash(pat))[1:]
		matches, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return nil, err
		}
		sort.Strings(matches)
		for _, m := range matches {
			if !strings.HasPrefix(m, filepath.Clean(root)) {
				continue
			}
			info, err := os.Stat(m)
			if err != nil {
				continue
			}
			if info.IsDir() {
				if walk(m) != nil && ctx.Err() != nil {
					return nil, ctx.Err()
				}
			} else {
				add(m, info)
			}
		}
	}
	return out, nil
}
