//go:build linux && !flashserve_portable

package statacc

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// deepPath is dir/first/ then levels directories of eight letters, then
// f.html: with 380 levels, the 3.4 KB paths of issue 29's storm.
func deepPath(dir, first string, levels int) string {
	return filepath.Join(dir, first, strings.Repeat("abcdefgh/", levels)+"f.html")
}

// TestDeepMissingPathsMakeOneNodeEach: a path missing from its first
// level below a watched directory makes one watcher node (the missing
// directory's, which its parent's watch sees appear) and no watch, however
// deep it goes: 40 distinct paths 380 levels deep make as many nodes as 40
// paths two levels deep, at most one each, and their answers are cached,
// watched, from the second lookup on. A node per level (380 per path, each
// holding its path) made such a storm cost memory quadratic in the depth.
func TestDeepMissingPathsMakeOneNodeEach(t *testing.T) {
	const paths = 40
	made := map[int]int64{}
	for _, levels := range []int{2, 380} {
		// No listing: each path is looked up through the watcher, not
		// answered from its directory's listing after eight.
		c := New(Options{Workers: 2, Revalidate: time.Hour, listAfter: -1})
		t.Cleanup(func() { c.Close() })
		site := filepath.Join(t.TempDir(), "site")
		write(t, filepath.Join(site, "index.html"), "home")
		watchedHit(t, c, filepath.Join(site, "index.html"))
		nodes := c.counts[WatchedDirs].Load()
		watches := inotifyWatches(t, c.watch.watchFD())
		for i := range paths {
			p := deepPath(site, "nx"+strconv.Itoa(i), levels)
			if got := describe(t, c, p); got != "missing" {
				t.Fatalf("%d levels: %s: %q", levels, p[len(site):len(site)+20], got)
			}
			if got := watchedHit(t, c, p); got != "missing" {
				t.Fatalf("%d levels: %s: %q on its second lookup", levels, p[len(site):len(site)+20], got)
			}
		}
		made[levels] = c.counts[WatchedDirs].Load() - nodes
		if made[levels] > paths {
			t.Errorf("%d distinct missing paths %d levels deep made %d watcher nodes, want at most one each", paths, levels, made[levels])
		}
		if w := inotifyWatches(t, c.watch.watchFD()); w != watches {
			t.Errorf("%d levels: %d inotify watches after the missing paths, %d before: a missing directory needs none", levels, w, watches)
		}
	}
	if made[380] != made[2] {
		t.Errorf("missing paths 380 levels deep made %d nodes, 2 levels deep %d: the count grows with the depth", made[380], made[2])
	}
}

// TestPathsBelowOneMissingDirectoryShareItsNode: distinct deep paths
// below the same missing directory (a client walking a tree that is not
// there) are indexed under that directory's one node; once the paths are
// known missing, looking them up makes no node at all.
func TestPathsBelowOneMissingDirectoryShareItsNode(t *testing.T) {
	c := New(Options{Workers: 2, Revalidate: time.Hour, listAfter: -1})
	t.Cleanup(func() { c.Close() })
	site := t.TempDir()
	watchedHit(t, c, filepath.Join(site, "absent.html"))
	nodes := c.counts[WatchedDirs].Load()
	for i := range 100 {
		p := deepPath(filepath.Join(site, "gone"), "d"+strconv.Itoa(i), 50)
		if got := watchedHit(t, c, p); got != "missing" {
			t.Fatalf("%s: %q", p, got)
		}
	}
	if got := c.counts[WatchedDirs].Load() - nodes; got != 1 {
		t.Errorf("100 paths below one missing directory made %d nodes, want 1", got)
	}
}

// TestDirectoriesCreatedOnAMissingPathAreSeen: a path cached missing
// because a directory on its way does not exist is served as soon as
// inotify tells once the directories are made (mkdir -p of the missing
// part) and the file written: with the missing part right below the root
// of the lookup or further down, one or many levels of it, below a file
// that is then made a directory (ENOTDIR), and below a dangling link
// whose target is then made.
func TestDirectoriesCreatedOnAMissingPathAreSeen(t *testing.T) {
	cases := []struct {
		name string
		// setup makes what exists, and returns the path looked up and
		// what to remove before making its directories (or "").
		setup func(t *testing.T, root string) (path, remove string)
	}{
		{"one level at the root", func(t *testing.T, root string) (string, string) {
			return filepath.Join(root, "nx", "f.html"), ""
		}},
		{"many levels at the root", func(t *testing.T, root string) (string, string) {
			return deepPath(root, "nx", 30), ""
		}},
		{"many levels further down", func(t *testing.T, root string) (string, string) {
			write(t, filepath.Join(root, "a", "b", "c", "index.html"), "c")
			return deepPath(filepath.Join(root, "a", "b", "c"), "nx", 30), ""
		}},
		{"below a file", func(t *testing.T, root string) (string, string) {
			write(t, filepath.Join(root, "a", "file"), "file")
			return deepPath(filepath.Join(root, "a"), "file", 10), filepath.Join(root, "a", "file")
		}},
		{"below a dangling link", func(t *testing.T, root string) (string, string) {
			if err := os.MkdirAll(filepath.Join(root, "a"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(root, "target"), filepath.Join(root, "a", "link")); err != nil {
				t.Fatal(err)
			}
			p := deepPath(filepath.Join(root, "a"), "link", 10)
			// Made below: the link's target is where the directories go.
			return p, ""
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			delays := newChangeDelays(t)
			root := t.TempDir()
			c := New(Options{Workers: 2, Revalidate: time.Hour})
			t.Cleanup(func() { c.Close() })
			p, remove := tc.setup(t, root)
			// Missing, or ENOTDIR below the file; cached, watched.
			if got := watchedHit(t, c, p); got != "missing" && !strings.HasSuffix(got, "not a directory") {
				t.Fatalf("%q before the directories are made", got)
			}
			changed := time.Now()
			if remove != "" {
				if err := os.Remove(remove); err != nil {
					t.Fatal(err)
				}
			}
			made := p
			if tc.name == "below a dangling link" {
				made = filepath.Join(root, "target", strings.TrimPrefix(p, filepath.Join(root, "a", "link")))
			}
			write(t, made, "new") // mkdir -p, then the file
			took := delays.seen(t, c, changed, p, "3:new")
			t.Logf("served %v after its directories were made", took)
		})
	}
}
