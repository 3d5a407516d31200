package statacc

import (
	"path/filepath"
	"strconv"
	"testing"

	"github.com/flashserve/caddy-flash-serve/internal/hotset"
)

func hotNames(files []hotset.File) []string {
	var out []string
	for _, f := range files {
		out = append(out, filepath.Base(f.Path)+"="+strconv.FormatInt(f.Hits, 10))
	}
	return out
}

// TestHotSetOrdersByRequestsAndDecays: the cache's counter counts every
// lookup of a regular file; Top ranks them and changes no count, Decay
// halves them.
func TestHotSetOrdersByRequestsAndDecays(t *testing.T) {
	dir := t.TempDir()
	c := New(Options{Workers: 1, NoInotify: true})
	defer c.Close()
	for name, n := range map[string]int{"a": 5, "b": 3, "c": 1} {
		p := filepath.Join(dir, name)
		write(t, p, name)
		for range n {
			describe(t, c, p)
		}
	}
	hot := c.HotSet()
	if got := hotNames(hot.Top(2, 0)); len(got) != 2 || got[0] != "a=5" || got[1] != "b=3" {
		t.Fatalf("Top(2) = %v, want [a=5 b=3]", got)
	}
	if got := hotNames(hot.Top(3, 0)); len(got) != 3 || got[0] != "a=5" || got[1] != "b=3" || got[2] != "c=1" {
		t.Fatalf("Top(3) after a Top = %v, want [a=5 b=3 c=1]: Top must not change the counts", got)
	}
	hot.Decay()
	if got := hotNames(hot.Top(3, 0)); len(got) != 2 || got[0] != "a=2" || got[1] != "b=1" {
		t.Fatalf("Top(3) after a Decay = %v, want [a=2 b=1] (c's 1 halved to 0)", got)
	}
}

// TestHotCountSurvivesItsEntry: the counts live in the sketch, not in the
// entries, so a file whose entry was invalidated, evicted or dropped by
// the janitor keeps its place in the hot set.
func TestHotCountSurvivesItsEntry(t *testing.T) {
	dir := t.TempDir()
	c := New(Options{Workers: 1, NoInotify: true})
	defer c.Close()
	hot, cool := filepath.Join(dir, "hot"), filepath.Join(dir, "cool")
	write(t, hot, "h")
	write(t, cool, "c")
	for range 6 {
		describe(t, c, hot)
	}
	describe(t, c, cool)
	c.Purge(hot, false)
	if c.entryCount() != 1 {
		t.Fatalf("%d entries, want only cool's", c.entryCount())
	}
	for range 2 {
		describe(t, c, hot) // a new entry: 2 more
	}
	if got := hotNames(c.HotSet().Top(10, 0)); len(got) != 2 || got[0] != "hot=8" || got[1] != "cool=1" {
		t.Fatalf("Top = %v, want [hot=8 cool=1]", got)
	}
	c.HotSet().Decay()
	c.flush()
	// Not in the cache at all now: a candidate from the last snapshot.
	if got := hotNames(c.HotSet().Top(10, 0)); len(got) != 1 || got[0] != "hot=4" {
		t.Fatalf("Top after a flush = %v, want [hot=4]", got)
	}
}
