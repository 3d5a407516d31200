package transmit

import (
	"context"
	"testing"
	"time"
)

// TestColdBuffersBounded: the cold chunks of ring reads come from one
// budget of 64 MiB for the process: once it is lent, the next reader
// waits (here until its context ends) instead of allocating more.
func TestColdBuffersBounded(t *testing.T) {
	if n := len(coldBudget); n != 0 {
		t.Fatalf("%d chunks lent before the test", n)
	}
	var lent []*coldRead
	for range cap(coldBudget) {
		c := &coldRead{}
		if err := c.borrow(context.Background(), coldChunk); err != nil {
			t.Fatal(err)
		}
		lent = append(lent, c)
	}
	if got := int64(len(lent)) * coldChunk; got != 64<<20 {
		t.Fatalf("the budget lent %d bytes, want 64 MiB", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	extra := &coldRead{}
	if err := extra.borrow(ctx, coldChunk); err == nil {
		t.Error("a chunk was lent past the 64 MiB budget")
		extra.giveBack()
	}
	for _, c := range lent {
		c.giveBack()
	}
	if n := len(coldBudget); n != 0 {
		t.Errorf("%d chunks still lent after all were given back", n)
	}
}

// TestSmallColdReadTakesASmallChunk: a ring read of a small body borrows
// a buffer of its own size class (4 KiB to noWaitMax), not a chunk of
// coldChunk; a larger one gets a whole chunk; each counts once in the
// budget and goes back to it.
func TestSmallColdReadTakesASmallChunk(t *testing.T) {
	for _, tc := range []struct{ want, size int64 }{{0, 4 << 10}, {1, 4 << 10}, {4 << 10, 4 << 10}, {8 << 10, 8 << 10}, {8<<10 + 1, 16 << 10},
		{noWaitMax, noWaitMax}, {noWaitMax + 1, coldChunk}, {coldChunk, coldChunk}} {
		c := &coldRead{}
		if err := c.borrow(context.Background(), tc.want); err != nil {
			t.Fatal(err)
		}
		if got := int64(cap(*c.bufp)); got != tc.size {
			t.Errorf("a read of %d bytes borrowed a buffer of %d, want %d", tc.want, got, tc.size)
		}
		if n := len(coldBudget); n != 1 {
			t.Errorf("%d tokens of the budget taken, want 1", n)
		}
		c.giveBack()
		if n := len(coldBudget); n != 0 {
			t.Errorf("%d tokens still taken after the buffer was given back", n)
		}
	}
}
