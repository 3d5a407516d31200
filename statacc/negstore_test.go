package statacc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// hasPointers reports whether values of t hold a pointer the garbage
// collector must follow.
func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.UnsafePointer, reflect.Map, reflect.Slice, reflect.String,
		reflect.Interface, reflect.Chan, reflect.Func:
		return true
	case reflect.Array:
		return t.Len() > 0 && hasPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
	}
	return false
}

// heapAfterGC is the live heap after two collections.
func heapAfterGC() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestNegativeStoreHoldsNoPointers: what the store keeps per negative
// entry (its slot, the index's words, the arena's bytes) holds no
// pointer, so that a cache full of 404s adds nothing to the collector's
// marking; the clock's negRefs and the watcher's words for them neither.
func TestNegativeStoreHoldsNoPointers(t *testing.T) {
	var sh negShard
	for _, ty := range []reflect.Type{
		reflect.TypeFor[negSlot](),
		reflect.TypeOf(sh.index.words).Elem(),
		reflect.TypeOf(sh.chunks).Elem().Elem(),
		reflect.TypeOf(sh.arena).Elem(),
		reflect.TypeOf(sh.free).Elem(),
		reflect.TypeFor[negRef](),
	} {
		if hasPointers(ty) {
			t.Errorf("%v holds pointers", ty)
		}
	}
}

// BenchmarkNegativeHit looks up, in turn, each of 50,000 missing paths
// in 50 directories whose 404s are cached (the bench's g), as a site
// does: one shard's read lock, no allocation, no system call besides the
// inotify poll. No listing, so that each answer is an entry's.
// heapB/negative is what an entry takes with its path.
func BenchmarkNegativeHit(b *testing.B) {
	c := New(Options{Workers: 2, Revalidate: time.Hour, listAfter: -1})
	defer c.Close()
	site := b.TempDir()
	var paths []string
	for d := range 50 {
		dir := filepath.Join(site, fmt.Sprintf("d%02d", d))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		paths = append(paths, missingPaths(dir, "m", 1000)...)
	}
	ctx := context.Background()
	get := func(p string) error {
		_, err := c.GetCounted(ctx, nil, site, SymlinksFollow, p)
		return err
	}
	get(paths[0]) // the watcher's nodes, the doorkeeper-free store
	before := float64(heapAfterGC())
	for _, p := range paths[1:] {
		if err := get(p); !errors.Is(err, fs.ErrNotExist) {
			b.Fatal(err)
		}
	}
	perEntry := (float64(heapAfterGC()) - before) / float64(len(paths)-1)
	misses := c.counts[Misses].Load()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := get(paths[i]); !errors.Is(err, fs.ErrNotExist) {
			b.Fatal(err)
		}
		if i++; i == len(paths) {
			i = 0
		}
	}
	b.ReportMetric(float64(c.counts[Misses].Load()-misses)/float64(b.N), "misses/op")
	b.ReportMetric(perEntry, "heapB/negative")
}

// TestNegativeStoreGivesBackABulkRemoval: once a purge takes 20,000
// cached negatives out, the store and the negative clock keep the room of
// what is left, not of their peak: every arena back at its smallest size,
// every index made anew, the clock's ring compacted to its smallest; and
// missing paths are cached and answered from the store again after it.
func TestNegativeStoreGivesBackABulkRemoval(t *testing.T) {
	root := t.TempDir()
	// No listing: every missing path is an entry in the store.
	c := New(Options{Workers: 2, Revalidate: time.Hour, NegativeEntries: 30000, listAfter: -1})
	defer c.Close()
	paths := missingPaths(root, "m", 20000)
	lookMissing(t, c, paths)
	least := len(paths)
	for k := range c.negatives.shards {
		sh := &c.negatives.shards[k]
		sh.mu.RLock()
		least = min(least, len(sh.index.words))
		sh.mu.RUnlock()
	}
	if least < 4*negChunk {
		t.Fatalf("a shard's index had room for only %d entries at its peak: the test wants %d", least, 4*negChunk)
	}
	if n := c.Purge(root, true); n != len(paths) {
		t.Fatalf("purged %d, want %d", n, len(paths))
	}
	for k := range c.negatives.shards {
		sh := &c.negatives.shards[k]
		sh.mu.RLock()
		if cap(sh.arena) > negArenaMin || sh.index.len() != 0 || len(sh.index.words) != 0 {
			t.Errorf("shard %d after the purge: arena of %d bytes (want at most %d), %d entries, index of %d words (want 0)",
				k, cap(sh.arena), negArenaMin, sh.index.len(), len(sh.index.words))
		}
		sh.mu.RUnlock()
	}
	c.negs.mu.Lock()
	ringLen, ringCap := len(c.negs.ring), cap(c.negs.ring)
	c.negs.mu.Unlock()
	if ringLen != 0 || ringCap > 2*compactMin {
		t.Errorf("negative clock after the purge: %d entries in room for %d, want none in room for at most %d", ringLen, ringCap, 2*compactMin)
	}
	again := paths[:100]
	lookMissing(t, c, again)
	if hits := negativeHitsOf(t, c, again); hits != int64(len(again)) {
		t.Errorf("%d negative hits of %d paths cached again after the purge", hits, len(again))
	}
}

// TestJanitorCountsWhatExpires: every entry the janitor drops as stale,
// negative or positive, counts in Expired, and the cache ends with none.
func TestJanitorCountsWhatExpires(t *testing.T) {
	root := t.TempDir()
	c := New(Options{Workers: 2, Revalidate: 100 * time.Millisecond, NoInotify: true, NegativeEntries: 30000})
	defer c.Close()
	files := manyFiles(t, root, 1, 5)
	for _, p := range files {
		if got := describe(t, c, p); got == "missing" || strings.HasPrefix(got, "error") {
			t.Fatalf("%s: %s", p, got)
		}
	}
	missing := missingPaths(root, "m", 2000)
	lookMissing(t, c, missing)
	deadline := time.Now().Add(10 * time.Second)
	for c.entryCount() > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	s := c.Snapshot()
	if want := int64(len(files) + len(missing)); s[Expired] != want || s[Entries] != 0 {
		t.Errorf("expired %d, want %d; %d entries left, want 0", s[Expired], want, s[Entries])
	}
}

// TestNegativePrefixesBeyondTheNumberedOnes: the store numbers the
// first negPrefixesMax prefixes (a root and a site's root); entries under
// more than that (a root with a placeholder, one per Host) keep their root
// and whole path in the arena. Either way a negative entry answers only
// for its own path under its own root, and the bytes bound counts each
// entry's root and whole path.
func TestNegativePrefixesBeyondTheNumberedOnes(t *testing.T) {
	var count, dead atomic.Int64
	s := newNegStore(&count, &dead)
	site := func(i int) string { return fmt.Sprintf("/srv/host-%04d", i) }
	path := func(i int) string { return fmt.Sprintf("%s/missing-%d", site(i), i) }
	insert := func(root, site, path string) negRef {
		h := s.hash(path)
		sh, shard := s.shardOf(h)
		sh.mu.Lock()
		defer sh.mu.Unlock()
		ref, _, _ := s.insertLocked(sh, shard, h, negNew{root: root, site: site, path: path, mark: -1})
		return ref
	}
	var wantBytes int64
	for i := range negPrefixesMax + 50 {
		if insert(site(i), site(i), path(i)) == 0 {
			t.Fatalf("entry %d not stored", i)
		}
		wantBytes += int64(len(site(i)) + len(path(i)))
	}
	// A path outside its site's root: its prefix has no dir.
	if insert("", site(1), "/elsewhere/x") == 0 {
		t.Fatal("a path outside the site not stored")
	}
	wantBytes += int64(len("/elsewhere/x"))
	if got := len(s.prefixes.Load().list); got != negPrefixesMax {
		t.Fatalf("%d prefixes numbered, want %d", got, negPrefixesMax)
	}
	if got := s.bytes.Load(); got != wantBytes {
		t.Errorf("bytes %d, want %d", got, wantBytes)
	}
	look := func(p string) (*negShard, *negSlot) {
		h := s.hash(p)
		sh, _ := s.shardOf(h)
		sh.mu.RLock()
		defer sh.mu.RUnlock()
		sl, _ := s.findLocked(sh, h, p)
		if sl == nil {
			t.Fatalf("%s not found", p)
		}
		return sh, sl
	}
	for _, i := range []int{0, negPrefixesMax - 1, negPrefixesMax, negPrefixesMax + 49} {
		sh, sl := look(path(i))
		sh.mu.RLock()
		inline := sl.prefixID&negInline != 0
		if inline != (i >= negPrefixesMax) {
			t.Errorf("entry %d: root kept in the arena %v", i, inline)
		}
		if kept, want := len(sh.restOf(sl)), len(path(i))-len(site(i)); !inline && kept != want {
			t.Errorf("entry %d keeps %d bytes of its path, want %d (the rest after its site's root)", i, kept, want)
		}
		if !s.rootIs(sh, sl, site(i)) || s.rootIs(sh, sl, site(i+1)) || s.rootIs(sh, sl, "") {
			t.Errorf("entry %d answers for the wrong root", i)
		}
		if !s.pathIs(sh, sl, path(i)) || s.pathIs(sh, sl, path(i)+"x") || s.pathIs(sh, sl, site(i+1)+"/missing-"+fmt.Sprint(i)) {
			t.Errorf("entry %d answers for the wrong path", i)
		}
		if got := string(s.appendPath(nil, sh, sl)); got != path(i) {
			t.Errorf("entry %d: path %q, want %q", i, got, path(i))
		}
		for pre, want := range map[string]bool{
			"": true, "/srv/host-": true, site(i): true, site(i) + "/": true, site(i) + "/missing-": true, path(i): true,
			site(i + 1): false, path(i) + "x": false, site(i) + "/missing-x": false, "/srv/host-x": false,
		} {
			if got := s.pathHasPrefix(sh, sl, pre); got != want {
				t.Errorf("entry %d: path %s has prefix %q: %v, want %v", i, path(i), pre, got, want)
			}
		}
		sh.mu.RUnlock()
	}
	if sh, sl := look("/elsewhere/x"); s.prefixOf(sl).dir != "" || string(sh.restOf(sl)) != "/elsewhere/x" {
		t.Errorf("the path outside its site keeps %q after prefix %q", sh.restOf(sl), s.prefixOf(sl).dir)
	}
	gone := s.removeWhere(func(*negShard, *negSlot) bool { return true })
	if len(gone) != negPrefixesMax+51 || count.Load() != 0 || s.bytes.Load() != 0 {
		t.Fatalf("removed %d, %d left, %d bytes counted", len(gone), count.Load(), s.bytes.Load())
	}
}

// TestNegativePrefixesBoundedInBytes: long roots (a root with a
// placeholder that a client fills) number at most negPrefixesMaxBytes of
// prefixes; a root confined to itself is kept once for root and dir.
func TestNegativePrefixesBoundedInBytes(t *testing.T) {
	var count, dead atomic.Int64
	s := newNegStore(&count, &dead)
	long := strings.Repeat("h", 4000)
	for i := range 400 {
		site := fmt.Sprintf("/srv/%s-%03d", long, i)
		id, rest := s.prefixID(site, site, site+"/x")
		numbered := id&negInline == 0
		if numbered != (s.prefixes.Load().bytes <= negPrefixesMaxBytes && i < negPrefixesMaxBytes/len(site)) {
			t.Fatalf("root %d (%d B) numbered %v with %d B numbered", i, len(site), numbered, s.prefixes.Load().bytes)
		}
		if numbered && rest != "/x" || !numbered && rest != site+"/x" {
			t.Fatalf("root %d: rest %q", i, rest)
		}
	}
	ps := s.prefixes.Load()
	if ps.bytes > negPrefixesMaxBytes || len(ps.list) == 0 {
		t.Fatalf("%d prefixes of %d B numbered", len(ps.list), ps.bytes)
	}
	if want := len(ps.list) * len(ps.list[0].root); ps.bytes != want {
		t.Errorf("prefixes counted %d B, want %d: a dir equal to its root is the root's string", ps.bytes, want)
	}
}
