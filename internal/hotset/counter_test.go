package hotset

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"unsafe"
)

// leave counts hits for path and lets its entry leave the cache.
func leave(c *Counter, path string, hits int64) {
	var t Tally
	t.hits.Store(uint32(hits))
	c.Leave(&t, File{Path: path})
}

// TestCounterIsBounded: a scan of many distinct paths neither grows the
// counter nor hides the few heavy ones; the sketch never undercounts and
// overcounts by little.
func TestCounterIsBounded(t *testing.T) {
	c := NewCounter(nil)
	size := unsafe.Sizeof(*c)
	for i := range 200000 {
		leave(c, "/scan/"+strconv.Itoa(i), 1)
	}
	for i := range 10 {
		leave(c, "/heavy/"+strconv.Itoa(i), int64(1000*(i+1)))
	}
	if len(c.pending) > minPending {
		t.Fatalf("%d pending candidates, bound %d", len(c.pending), minPending)
	}
	if unsafe.Sizeof(*c) != size || size > 300<<10 {
		t.Fatalf("counter is %d bytes", size)
	}
	for i := range 10 {
		want := uint32(1000 * (i + 1))
		got := c.estimate(c.key("/heavy/" + strconv.Itoa(i)))
		if got < want || got > want+50 {
			t.Errorf("heavy %d: estimate %d, true count %d", i, got, want)
		}
	}
	over := 0
	for i := range 1000 {
		if c.estimate(c.key("/scan/"+strconv.Itoa(i))) > 1+16 {
			over++
		}
	}
	if over > 10 {
		t.Errorf("%d of 1000 scanned paths overcounted by more than 16", over)
	}
}

// TestHitAllocatesNothing: the hot path's one call.
func TestHitAllocatesNothing(t *testing.T) {
	var tl Tally
	if n := testing.AllocsPerRun(1000, tl.Hit); n != 0 {
		t.Fatalf("Hit allocates %v times", n)
	}
	if tl.hits.Load() < 1000 {
		t.Fatalf("%d hits counted", tl.hits.Load())
	}
}

// TestHitStopsAtTheTop: a tally that 2^32 requests reach between two
// folds keeps the most it can count, rather than wrap to a few.
func TestHitStopsAtTheTop(t *testing.T) {
	var tl Tally
	tl.hits.Store(^uint32(0) - 1)
	tl.Hit()
	tl.Hit()
	tl.Hit()
	if got := tl.hits.Load(); got != ^uint32(0) {
		t.Fatalf("%d hits after 2^32 + 1, want %d", got, ^uint32(0))
	}
	c := NewCounter(nil)
	c.Leave(&tl, File{Path: "/srv/hot"})
	if top := c.Top(1, 0); len(top) != 1 || top[0].Hits != int64(^uint32(0)) {
		t.Fatalf("Top = %+v, want /srv/hot with %d hits", top, ^uint32(0))
	}
}

// TestTopHoldsWhatFitsTheBytes: a snapshot stops at the file that crosses
// its bytes, that one included.
func TestTopHoldsWhatFitsTheBytes(t *testing.T) {
	c := NewCounter(nil)
	for i := range 10 {
		var tl Tally
		p := "/srv/" + strconv.Itoa(i)
		tl.hits.Store(uint32(100 - i))
		c.Leave(&tl, File{Path: p, Size: 10})
	}
	if top := c.Top(100, 35); len(top) != 4 || top[3].Path != "/srv/3" {
		t.Fatalf("Top(100, 35) = %+v, want the 4 hottest (40 bytes, the fourth crossing 35)", top)
	}
	if top := c.Top(2, 0); len(top) != 2 {
		t.Fatalf("Top(2, 0) = %+v, want 2 files", top)
	}
}

// TestRememberKeepsMoreCandidates: a counter told to remember n files
// keeps n of those that left the cache, where it kept minPending.
func TestRememberKeepsMoreCandidates(t *testing.T) {
	c := NewCounter(nil)
	c.remember(3 * minPending)
	for i := range 2 * minPending {
		leave(c, "/srv/"+strconv.Itoa(i), 1)
	}
	if top := c.Top(3*minPending, 0); len(top) != 2*minPending {
		t.Fatalf("%d files in the snapshot, want all %d that left the cache", len(top), 2*minPending)
	}
}

// TestLeaveBeforeTheFirstHitCountsOne: a cache over its descriptors may
// evict a new entry before the hit of the request that made it lands;
// the file still counts that request, once.
func TestLeaveBeforeTheFirstHitCountsOne(t *testing.T) {
	c := NewCounter(nil)
	var tl Tally
	c.Leave(&tl, File{Path: "/srv/new"})
	c.Leave(&tl, File{Path: "/srv/new"}) // left again with nothing new: no more
	if top := c.Top(10, 0); len(top) != 1 || top[0].Hits != 1 {
		t.Fatalf("Top = %+v, want /srv/new with 1 hit", top)
	}
}

// TestRepeatedDeparturesKeepEveryFile: on a tree larger than the cache's
// descriptors, each file's entry leaves the cache every time it is asked
// for. A snapshot of as many files as the counter remembers must name
// every file asked for, not the first departures' few: with departures
// kept as a list, the files that left twice early filled the bound, and
// the hot set of a 30 s run of the bench's e named 39,000 of its 100,000
// files.
func TestRepeatedDeparturesKeepEveryFile(t *testing.T) {
	const files, times = 8000, 3 // more files than minPending
	c := NewCounter(nil)
	c.remember(files)
	order := make([]int, 0, files*times)
	for i := range files * times {
		order = append(order, i%files)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for _, i := range order {
		leave(c, "/tree/"+strconv.Itoa(i), 1)
	}
	if got := len(c.Top(files, 0)); got != files {
		t.Fatalf("the snapshot names %d files, want all %d that were asked for", got, files)
	}
}
