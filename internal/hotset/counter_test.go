package hotset

import (
	"strconv"
	"testing"
	"unsafe"
)

// leave counts hits for path and lets its entry leave the cache.
func leave(c *Counter, path string, hits int64) {
	var t Tally
	c.Track(&t, path)
	t.hits.Store(hits)
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
	if len(c.pending) > maxPending {
		t.Fatalf("%d pending candidates, bound %d", len(c.pending), maxPending)
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
