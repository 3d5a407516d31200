//go:build linux && !flashserve_portable

package statacc

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestNameIndexMatchesAMap runs random puts and removes of 500 names in
// one directory node (so that probes collide, wrap around, and removals
// shift runs back) against a Go map, and compares every answer.
func TestNameIndexMatchesAMap(t *testing.T) {
	d := &dirNode{path: "/srv/www"}
	var x nameIndex
	want := map[string]*meta{}
	rng := rand.New(rand.NewPCG(3, 4))
	for op := range 100000 {
		name := fmt.Sprintf("f%03d.html", rng.IntN(500))
		switch rng.IntN(3) {
		case 0:
			m := &meta{path: d.path + "/" + name}
			x.put(d, name, m)
			want[name] = m
		case 1:
			x.remove(d, name)
			delete(want, name)
		case 2:
			if got := x.get(d, name); got != want[name] {
				t.Fatalf("op %d: get(%s) = %p, want %p", op, name, got, want[name])
			}
		}
		if x.len() != len(want) {
			t.Fatalf("op %d: len %d, want %d", op, x.len(), len(want))
		}
	}
	for i := range 500 {
		name := fmt.Sprintf("f%03d.html", i)
		if got := x.get(d, name); got != want[name] {
			t.Fatalf("get(%s) = %p, want %p", name, got, want[name])
		}
	}
	n := 0
	x.each(func(m *meta) {
		if want[entryKey(d, m.path)] != m {
			t.Fatalf("each gave %s, not indexed", m.path)
		}
		n++
	})
	if n != len(want) {
		t.Fatalf("each gave %d entries, want %d", n, len(want))
	}
	for name := range want {
		x.remove(d, name)
	}
	if x.len() != 0 || x.slots != nil {
		t.Fatalf("emptied index keeps %d entries, %d slots", x.len(), len(x.slots))
	}
}
