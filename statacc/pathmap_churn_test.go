package statacc

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// checkPathTables checks every shard's table against its counts: live
// and deleted tags as counted, each used tag on a slot holding a meta of
// that hash, and at least a quarter of the slots empty, so that every
// probe ends.
func checkPathTables(t *testing.T, pm *pathMap) {
	t.Helper()
	for s := range pm.tables {
		tb := pm.tables[s].Load()
		if tb == nil {
			continue
		}
		l := &pm.locks[s]
		l.mu.Lock()
		live, dead, empty := 0, 0, 0
		for i := range tb.slots {
			switch tag := tb.tag(uint64(i)); tag {
			case 0:
				empty++
			case tagDeleted:
				dead++
				if tb.slots[i].Load() != nil {
					t.Errorf("shard %d slot %d: deleted tag over a meta", s, i)
				}
			default:
				live++
				m := tb.slots[i].Load()
				if m == nil {
					t.Errorf("shard %d slot %d: used tag over no meta", s, i)
					continue
				}
				if _, shard, want := pm.hash(m.path); shard != s || want != tag {
					t.Errorf("shard %d slot %d: %s has tag %#x, hashes to shard %d tag %#x", s, i, m.path, tag, shard, want)
				}
			}
		}
		if live != l.live || dead != l.dead {
			t.Errorf("shard %d: %d live and %d deleted slots, counted %d and %d", s, live, dead, l.live, l.dead)
		}
		if empty*4 < len(tb.slots) {
			t.Errorf("shard %d: %d empty slots of %d", s, empty, len(tb.slots))
		}
		l.mu.Unlock()
	}
}

// TestPathMapChurnOfDistinctPathsStaysSmall: a scanner's stream of
// distinct paths (short ones and 380 levels deep), each stored and soon
// deleted, leaves deleted slots behind; they are counted, so the tables
// are rebuilt before they fill, stay the size of what is live, and every
// probe still ends at an empty slot.
func TestPathMapChurnOfDistinctPathsStaysSmall(t *testing.T) {
	pm := testPathMap()
	deep := strings.Repeat("/d", 380)
	var window []*meta
	for i := range 100000 {
		p := fmt.Sprintf("/scan/%d", i)
		if i%3 == 0 {
			p = fmt.Sprintf("%s/%d", deep, i)
		}
		m := &meta{path: p}
		pm.Swap(m)
		window = append(window, m)
		if len(window) > 16 {
			if !pm.CompareAndDelete(window[0]) {
				t.Fatalf("%s not deleted", window[0].path)
			}
			window = window[1:]
		}
		if i%10000 == 0 {
			checkPathTables(t, pm)
			if got := pm.Load(fmt.Sprintf("/never/%d", i)); got != nil {
				t.Fatalf("a path never stored was found: %s", got.path)
			}
		}
	}
	checkPathTables(t, pm)
	if got := pm.slotCount(); got > pathShards*pathTableMin*2 {
		t.Errorf("%d slots for %d live paths after a churn of 100,000", got, len(window))
	}
	if pm.Len() != len(window) {
		t.Errorf("Len %d, want %d", pm.Len(), len(window))
	}
	for _, m := range window {
		if pm.Load(m.path) != m {
			t.Fatalf("%s lost in the churn", m.path)
		}
	}
}

// pathsAt returns n paths of shard 0 whose first slot in a table of
// pathTableMin slots is home.
func pathsAt(pm *pathMap, home uint64, n int, prefix string) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		p := fmt.Sprintf("/%s/%d", prefix, i)
		if h, shard, _ := pm.hash(p); shard == 0 && h&(pathTableMin-1) == home {
			out = append(out, p)
		}
	}
	return out
}

// TestPathMapRangeVisitsAPathOnceWhileItIsStoredAgain: a path that is
// deleted and stored again while Range runs (an entry evicted and looked
// up again during a hot-set snapshot or a purge) is given to f once, as
// sync.Map's Range promises, even when its new slot lies after the one
// Range already read: here its probe wrapped around the table's end, and
// the slot it is stored in again is before the wrap.
func TestPathMapRangeVisitsAPathOnceWhileItIsStoredAgain(t *testing.T) {
	pm := testPathMap()
	x := &meta{path: pathsAt(pm, pathTableMin-2, 1, "x")[0]}
	y := &meta{path: pathsAt(pm, pathTableMin-1, 1, "y")[0]}
	a := &meta{path: pathsAt(pm, pathTableMin-2, 2, "a")[1]}
	for _, m := range []*meta{x, y, a} {
		pm.Swap(m)
	}
	// a's probe went from the slot before last, through the last, to 0.
	if tb := pm.tables[0].Load(); len(tb.slots) != pathTableMin || tb.slots[0].Load() != a {
		t.Fatalf("setup: %s is not in slot 0 of a table of %d", a.path, len(tb.slots))
	}
	a2 := &meta{path: a.path}
	seen := map[string]int{}
	pm.Range(func(m *meta) bool {
		seen[m.path]++
		if m == a {
			// Meanwhile, elsewhere: x is evicted, a evicted and looked up again.
			pm.CompareAndDelete(x)
			pm.CompareAndDelete(a)
			pm.Swap(a2)
		}
		return true
	})
	if seen[a.path] != 1 {
		t.Errorf("Range gave %s %d times", a.path, seen[a.path])
	}
	if pm.Load(a.path) != a2 {
		t.Errorf("%s is not its new meta", a.path)
	}
}

// TestPathMapRangeDeletingAPrefixUnderWriters is Purge's pass: Range
// deletes the paths under a prefix (shrinking the tables as it goes)
// while writers store and delete other paths and readers load the paths
// that stay. Every path under the prefix that was there throughout is
// deleted, no path that stays is lost, and each is given to f once.
func TestPathMapRangeDeletingAPrefixUnderWriters(t *testing.T) {
	for round := range 20 {
		pm := testPathMap()
		var gone, stay []*meta
		for i := range 20000 {
			m := &meta{path: fmt.Sprintf("/gone/%d/%d", i%97, i)}
			pm.Swap(m)
			gone = append(gone, m)
		}
		for i := range 300 {
			m := &meta{path: fmt.Sprintf("/stay/%d", i)}
			pm.Swap(m)
			stay = append(stay, m)
		}
		var stop atomic.Bool
		var wg sync.WaitGroup
		var failed atomic.Value
		wg.Add(2)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(round), 1))
			for i := 0; !stop.Load(); i++ {
				m := &meta{path: fmt.Sprintf("/other/%d", rng.IntN(5000))}
				pm.Swap(m)
				if i%2 == 0 {
					pm.CompareAndDelete(m)
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				m := stay[i%len(stay)]
				if got := pm.Load(m.path); got != m {
					failed.Store(fmt.Sprintf("Load(%s) = %p during the purge, want %p", m.path, got, m))
					return
				}
			}
		}()
		seen := map[*meta]int{}
		pm.Range(func(m *meta) bool {
			seen[m]++
			if strings.HasPrefix(m.path, "/gone/") {
				pm.CompareAndDelete(m)
			}
			return true
		})
		stop.Store(true)
		wg.Wait()
		if f := failed.Load(); f != nil {
			t.Fatal(f)
		}
		for _, m := range gone {
			if pm.Load(m.path) != nil || seen[m] != 1 {
				t.Fatalf("round %d: %s given to f %d times, left: %v", round, m.path, seen[m], pm.Load(m.path) != nil)
			}
		}
		for _, m := range stay {
			if seen[m] != 1 {
				t.Fatalf("round %d: %s given to f %d times", round, m.path, seen[m])
			}
		}
		for m, n := range seen {
			if n != 1 {
				t.Fatalf("round %d: %s given to f %d times", round, m.path, n)
			}
		}
		checkPathTables(t, pm)
	}
}

// TestPathMapLoadSeesAPathWhileItIsReplaced: while a writer replaces the
// metas of some paths (a re-lookup's Swap) and another grows and shrinks
// the same shards' tables, a Load of a replaced path always finds one of
// its metas, never none and never another path's.
func TestPathMapLoadSeesAPathWhileItIsReplaced(t *testing.T) {
	pm := testPathMap()
	paths := make([]string, 256)
	for i := range paths {
		paths[i] = fmt.Sprintf("/replaced/%d", i)
		pm.Swap(&meta{path: paths[i]})
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			pm.Swap(&meta{path: paths[i%len(paths)]})
		}
	}()
	go func() {
		defer wg.Done()
		for round := 0; !stop.Load(); round++ {
			var ms []*meta
			for i := range 3000 {
				m := &meta{path: fmt.Sprintf("/grow/%d/%d", round, i)}
				pm.Swap(m)
				ms = append(ms, m)
			}
			for _, m := range ms {
				pm.CompareAndDelete(m)
			}
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()
	for i := range 300000 {
		p := paths[i%len(paths)]
		if got := pm.Load(p); got == nil || got.path != p {
			t.Fatalf("Load(%s) = %v while it was replaced", p, got)
		}
	}
}
