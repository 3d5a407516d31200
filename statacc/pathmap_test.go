package statacc

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

func testPathMap() *pathMap { return &pathMap{seed: maphash.MakeSeed()} }

// slotCount is the slots of every shard's table: the map's room.
func (pm *pathMap) slotCount() int {
	n := 0
	for s := range pm.tables {
		if t := pm.tables[s].Load(); t != nil {
			n += len(t.slots)
		}
	}
	return n
}

// TestPathMapMatchesAMap runs random stores, swaps and deletes of 3,000
// paths (so that tags collide, probes wrap around and tables grow and
// shrink) against a Go map, and compares every answer.
func TestPathMapMatchesAMap(t *testing.T) {
	pm := testPathMap()
	want := map[string]*meta{}
	rng := rand.New(rand.NewPCG(1, 2))
	paths := make([]string, 3000)
	for i := range paths {
		paths[i] = fmt.Sprintf("/srv/www/d%03d/f%05d.bin", i%37, i)
	}
	for op := range 200000 {
		p := paths[rng.IntN(len(paths))]
		switch rng.IntN(5) {
		case 0, 1:
			m := &meta{path: p}
			old, replaced := pm.Swap(m)
			if w, ok := want[p]; ok != replaced || old != w {
				t.Fatalf("op %d: Swap(%s) = %p, %v; want %p, %v", op, p, old, replaced, w, ok)
			}
			want[p] = m
		case 2:
			got := pm.LoadAndDelete(p)
			if got != want[p] {
				t.Fatalf("op %d: LoadAndDelete(%s) = %p, want %p", op, p, got, want[p])
			}
			delete(want, p)
		case 3:
			// A meta that is not the path's own is never deleted.
			if w := want[p]; w != nil && pm.CompareAndDelete(&meta{path: p}) {
				t.Fatalf("op %d: CompareAndDelete of another meta of %s deleted it", op, p)
			}
			if w := want[p]; w != nil && !pm.CompareAndDelete(w) {
				t.Fatalf("op %d: CompareAndDelete(%s) of its own meta failed", op, p)
			}
			delete(want, p)
		case 4:
			if got := pm.Load(p); got != want[p] {
				t.Fatalf("op %d: Load(%s) = %p, want %p", op, p, got, want[p])
			}
		}
	}
	for _, p := range paths {
		if got := pm.Load(p); got != want[p] {
			t.Fatalf("Load(%s) = %p, want %p", p, got, want[p])
		}
	}
	seen := map[string]bool{}
	pm.Range(func(m *meta) bool {
		if seen[m.path] || want[m.path] != m {
			t.Fatalf("Range gave %s twice or not its meta", m.path)
		}
		seen[m.path] = true
		return true
	})
	if len(seen) != len(want) || pm.Len() != len(want) {
		t.Fatalf("Range gave %d, Len %d, want %d", len(seen), pm.Len(), len(want))
	}
}

// TestPathMapGivesRoomBack: a purge of most paths shrinks the tables, and
// a full map stays at most three quarters full.
func TestPathMapGivesRoomBack(t *testing.T) {
	pm := testPathMap()
	const n = 50000
	var ms []*meta
	for i := range n {
		m := &meta{path: fmt.Sprintf("/d%02d/f%06d", i%50, i)}
		pm.Swap(m)
		ms = append(ms, m)
	}
	full := pm.slotCount()
	if full*3 < n*4 || full > n*4 {
		t.Errorf("%d slots for %d paths: want between 4/3 and 4 slots a path", full, n)
	}
	for _, m := range ms[:n-500] {
		if !pm.CompareAndDelete(m) {
			t.Fatalf("%s not deleted", m.path)
		}
	}
	if got := pm.slotCount(); got > full/8 {
		t.Errorf("%d slots for 500 paths after deleting %d (%d when full): the room is not given back", got, n-500, full)
	}
	for _, m := range ms[n-500:] {
		if pm.Load(m.path) != m {
			t.Fatalf("%s lost by the shrink", m.path)
		}
	}
}

// TestPathMapLoadSeesStablePathsUnderWriters: while writers add, replace
// and delete other paths, growing and shrinking the tables, a Load of a
// path that stays in the map always finds it, and a path never stored is
// never found. Run it with -race.
func TestPathMapLoadSeesStablePathsUnderWriters(t *testing.T) {
	pm := testPathMap()
	stable := make([]*meta, 200)
	for i := range stable {
		stable[i] = &meta{path: fmt.Sprintf("/stable/%04d", i)}
		pm.Swap(stable[i])
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for round := 0; !stop.Load() && round < 200; round++ {
				var ms []*meta
				for i := range 2000 {
					m := &meta{path: fmt.Sprintf("/churn%d/%d/%d", w, round, i)}
					pm.Swap(m)
					ms = append(ms, m)
				}
				rng.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
				for _, m := range ms {
					pm.CompareAndDelete(m)
				}
			}
		}()
	}
	for i := 0; i < 200000; i++ {
		m := stable[i%len(stable)]
		if got := pm.Load(m.path); got != m {
			stop.Store(true)
			wg.Wait()
			t.Fatalf("Load(%s) = %p under writers, want %p", m.path, got, m)
		}
		if got := pm.Load(fmt.Sprintf("/never/%d", i%1000)); got != nil {
			t.Fatalf("a path never stored was found: %s", got.path)
		}
	}
	stop.Store(true)
	wg.Wait()
}

// BenchmarkPathMapLoad is a hit's lookup among a million paths.
func BenchmarkPathMapLoad(b *testing.B) {
	pm := testPathMap()
	paths := make([]string, 1<<20)
	for i := range paths {
		paths[i] = fmt.Sprintf("/var/tmp/flash-bench-scale/tree/d%04d/f%07d.bin", i/1000, i)
		pm.Swap(&meta{path: paths[i]})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if pm.Load(paths[(i*7919)&(len(paths)-1)]) == nil {
			b.Fatal("miss")
		}
	}
}
