package statacc

import (
	"path/filepath"
	"strconv"
	"testing"
	"unsafe"
)

func hotNames(files []HotFile) []string {
	var out []string
	for _, f := range files {
		out = append(out, filepath.Base(f.Path)+"="+strconv.FormatInt(f.Hits, 10))
	}
	return out
}

func TestHottestOrdersByRequestsAndHalves(t *testing.T) {
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
	if got := hotNames(c.Hottest(2)); len(got) != 2 || got[0] != "a=5" || got[1] != "b=3" {
		t.Fatalf("Hottest(2) = %v, want [a=5 b=3]", got)
	}
	// The snapshot halved every count.
	if got := hotNames(c.Hottest(3)); len(got) != 2 || got[0] != "a=2" || got[1] != "b=1" {
		t.Fatalf("Hottest(3) after a snapshot = %v, want [a=2 b=1] (c's 1 halved to 0)", got)
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
	c.Invalidate(hot, false)
	if c.Len() != 1 {
		t.Fatalf("%d entries, want only cool's", c.Len())
	}
	for range 2 {
		describe(t, c, hot) // a new entry: 2 more
	}
	if got := hotNames(c.Hottest(10)); len(got) != 2 || got[0] != "hot=8" || got[1] != "cool=1" {
		t.Fatalf("Hottest = %v, want [hot=8 cool=1]", got)
	}
	c.Flush()
	// Not in the cache at all now: a candidate from the last snapshot.
	if got := hotNames(c.Hottest(10)); len(got) != 1 || got[0] != "hot=4" {
		t.Fatalf("Hottest after a flush = %v, want [hot=4]", got)
	}
}

// TestHotCounterIsBounded: a scan of many distinct paths neither grows
// the counter nor hides the few heavy ones; the sketch never undercounts
// and overcounts by little.
func TestHotCounterIsBounded(t *testing.T) {
	h := newHotCounter()
	size := unsafe.Sizeof(*h)
	for i := range 200000 {
		e := &Entry{Path: "/scan/" + strconv.Itoa(i), hotKey: h.key("/scan/" + strconv.Itoa(i))}
		e.hits.Store(1)
		h.leave(e)
	}
	for i := range 10 {
		p := "/heavy/" + strconv.Itoa(i)
		e := &Entry{Path: p, hotKey: h.key(p)}
		e.hits.Store(int64(1000 * (i + 1)))
		h.leave(e)
	}
	if len(h.pending) > maxPending {
		t.Fatalf("%d pending candidates, bound %d", len(h.pending), maxPending)
	}
	if unsafe.Sizeof(*h) != size || size > 300<<10 {
		t.Fatalf("counter is %d bytes", size)
	}
	for i := range 10 {
		want := uint32(1000 * (i + 1))
		got := h.estimate(h.key("/heavy/" + strconv.Itoa(i)))
		if got < want || got > want+50 {
			t.Errorf("heavy %d: estimate %d, true count %d", i, got, want)
		}
	}
	over := 0
	for i := range 1000 {
		if h.estimate(h.key("/scan/"+strconv.Itoa(i))) > 1+16 {
			over++
		}
	}
	if over > 10 {
		t.Errorf("%d of 1000 scanned paths overcounted by more than 16", over)
	}
}
