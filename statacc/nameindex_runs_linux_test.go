//go:build linux && !flashserve_portable

package statacc

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"testing"
)

// TestNameIndexRemovesFromRunsThatWrap keeps at most six names in one
// eight-slot table, all of them at home in its last two slots or its
// first, so that every run crosses the table's end and every removal
// shifts entries back across it; each answer is compared with a map's.
func TestNameIndexRemovesFromRunsThatWrap(t *testing.T) {
	d := &dirNode{path: "/srv/www"}
	var names []string
	for i := 0; len(names) < 12; i++ {
		name := fmt.Sprintf("n%d", i)
		if home := maphash.String(nameSeed, name) & 7; home == 6 || home == 7 || home == 0 {
			names = append(names, name)
		}
	}
	var x nameIndex
	want := map[string]*meta{}
	rng := rand.New(rand.NewPCG(5, 6))
	for op := range 200000 {
		name := names[rng.IntN(len(names))]
		if _, ok := want[name]; !ok && len(want) < 6 {
			m := &meta{path: d.path + "/" + name}
			x.put(d, name, m)
			want[name] = m
		} else {
			x.remove(d, name)
			delete(want, name)
		}
		if len(x.slots) > 8 {
			t.Fatalf("op %d: %d slots for %d names", op, len(x.slots), len(want))
		}
		for _, n := range names {
			if got := x.get(d, n); got != want[n] {
				t.Fatalf("op %d: get(%s) = %p, want %p", op, n, got, want[n])
			}
		}
	}
}
