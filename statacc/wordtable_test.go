package statacc

import (
	"math/rand/v2"
	"testing"
)

// TestWordTableMatchesAMap runs random adds, removes and lookups of 600
// words against a Go map and compares every answer. Half the words share
// their high half with another (as a shard's negRefs of one slot do
// across its generations, and index words of one tag), so that probes
// collide, runs wrap around the table's end and removals shift them back;
// shrink is called now and then.
func TestWordTableMatchesAMap(t *testing.T) {
	var x wordTable
	want := map[uint64]bool{}
	rng := rand.New(rand.NewPCG(5, 6))
	word := func() uint64 {
		k := rng.Uint64N(600)
		return (k/2)<<32 | (k%2 + 1) // high half shared by pairs; never 0
	}
	for op := range 200000 {
		w := word()
		switch rng.IntN(4) {
		case 0, 1:
			if !want[w] {
				x.add(w)
				want[w] = true
			}
		case 2:
			if got := x.remove(w); got != want[w] {
				t.Fatalf("op %d: remove(%x) = %v, want %v", op, w, got, want[w])
			}
			delete(want, w)
		case 3:
			if got := x.index(w) >= 0; got != want[w] {
				t.Fatalf("op %d: index(%x) found %v, want %v", op, w, got, want[w])
			}
		}
		if op%5000 == 0 {
			x.shrink()
		}
		if x.len() != len(want) {
			t.Fatalf("op %d: len %d, want %d", op, x.len(), len(want))
		}
		if len(x.words) > 0 && x.len()*4 > len(x.words)*3 {
			t.Fatalf("op %d: %d words in a table of %d, more than three quarters full", op, x.len(), len(x.words))
		}
	}
	n := 0
	for _, w := range x.words {
		if w != 0 {
			if !want[w] {
				t.Fatalf("the table holds %x, removed", w)
			}
			n++
		}
	}
	if n != len(want) {
		t.Fatalf("the table holds %d words, want %d", n, len(want))
	}
	for w := range want {
		x.remove(w)
	}
	if x.len() != 0 || x.words != nil {
		t.Fatalf("emptied table keeps %d words in %d", x.len(), len(x.words))
	}
}

// TestWordTableShrinkGivesRoomBack: a table that held 10,000 words keeps
// its room while they leave one at a time, and shrink leaves it at most
// half full and at least a quarter, its words all still found.
func TestWordTableShrinkGivesRoomBack(t *testing.T) {
	var x wordTable
	for i := range uint64(10000) {
		x.add(i<<32 | 1)
	}
	peak := len(x.words)
	for i := range uint64(9900) {
		x.remove(i<<32 | 1)
	}
	if len(x.words) != peak {
		t.Fatalf("removals resized the table from %d to %d words", peak, len(x.words))
	}
	x.shrink()
	if len(x.words) > 4*x.len() || 2*x.len() > len(x.words) {
		t.Fatalf("%d words in a table of %d after shrink", x.len(), len(x.words))
	}
	for i := uint64(9900); i < 10000; i++ {
		if x.index(i<<32|1) < 0 {
			t.Fatalf("word %d lost by shrink", i)
		}
	}
}
