package statacc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
	"unsafe"
)

// manyFiles makes dirs directories of perDir files of 8 KiB (sparse, so
// quick to make) under root, as e's tree, and returns their paths.
func manyFiles(tb testing.TB, root string, dirs, perDir int) []string {
	tb.Helper()
	var paths []string
	for d := range dirs {
		dir := filepath.Join(root, fmt.Sprintf("d%03d", d))
		if err := os.Mkdir(dir, 0o755); err != nil {
			tb.Fatal(err)
		}
		for i := range perDir {
			p := filepath.Join(dir, fmt.Sprintf("f%05d.bin", i))
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				tb.Fatal(err)
			}
			if err := os.Truncate(p, 8<<10); err != nil {
				tb.Fatal(err)
			}
			paths = append(paths, p)
		}
	}
	return paths
}

// heapPerEntry returns the Go heap that caching paths, looked up as a
// site rooted at site looks them up, costs per entry, after a forced
// collection before and after, so that what is measured is what the cache
// keeps, not what the lookups left for the collector. The paths are made
// before, as a request makes its path: a cache that keeps one counts
// nothing for it, one that copies it counts the copy.
func heapPerEntry(t *testing.T, c *Cache, site string, paths []string, wantErr bool) float64 {
	t.Helper()
	ctx := context.Background()
	var before, after runtime.MemStats
	had := c.entryCount()
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, p := range paths {
		e, err := c.GetCounted(ctx, nil, site, SymlinksFollow, p)
		if wantErr != (err != nil) {
			t.Fatalf("%s: %v", p, err)
		}
		if wantErr && !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: %v, want ErrNotExist", p, err)
		}
		if e != nil {
			e.Release()
		}
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got := c.entryCount() - had; got != len(paths) {
		t.Fatalf("%d entries cached, want %d", got, len(paths))
	}
	return (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(len(paths))
}

// negativeEntryBound is the most Go heap a negative entry may take with
// its path (TestHeapPerEntry). It measures about 100 B (90 B where there
// is no watcher to index it).
const negativeEntryBound = 120

// TestHeapPerEntry measures what a cached negative entry and a cached file
// entry cost in Go heap, and holds them to the bounds with paths
// like the bench's: 400 B a file entry with its 58-byte path, 120 B a
// negative one with its path (19 B below the site's root).
func TestHeapPerEntry(t *testing.T) {
	root := t.TempDir()
	files := manyFiles(t, root, 20, 150)
	// Ten missing names a file: 30,000 negatives, so that what the store
	// allocates once a shard (64 arenas of 4 KiB at least) is not what is
	// measured.
	var missing []string
	for _, p := range files {
		for i := range 10 {
			missing = append(missing, filepath.Join(filepath.Dir(p), fmt.Sprintf("m%d-%s", i, filepath.Base(p))))
		}
	}
	// No listing: every missing path is an entry, which is what is measured.
	c := New(Options{Workers: 2, NegativeEntries: len(missing) + 1, MaxOpenFiles: len(files) + 64, listAfter: -1, MemoryBudget: -1})
	defer c.Close()
	// First lookups elsewhere make the watcher's root and what is made
	// once, lazily, which is not per entry: the mime package's tables (an
	// existing file's first lookup reads /etc/mime.types, about 200 B per
	// entry of the 3,000 measured here, once counted in the file figure).
	warmUp := filepath.Join(root, "warm-up.bin")
	if err := os.WriteFile(warmUp, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	describe(t, c, warmUp)
	describe(t, c, filepath.Join(root, "warm-up-missing"))
	c.Purge(root, true)

	neg := heapPerEntry(t, c, root, missing, true)
	file := heapPerEntry(t, c, root, files, false)
	rest := 0
	for _, p := range missing {
		rest += len(p) - len(root)
	}
	t.Logf("Go heap the cache allocates per entry: negative %.0f B (its %.0f-byte path below the site's root included), file %.0f B besides its path (meta %d B + Entry %d B, allocated together: %d B)",
		neg, float64(rest)/float64(len(missing)), file, unsafe.Sizeof(meta{}), unsafe.Sizeof(Entry{}), unsafe.Sizeof(metaWithEntry{}))
	// At most 120 B a negative entry with its path (issue #33). The store
	// copies the path (the request's is garbage after it), the part below
	// the site's root: here 19 B, as the bench's request paths. neg is
	// the 40-byte slot, that copy and the arena's room to grow, the
	// index's word, the clock's negRef and the watcher's word for it.
	if neg > negativeEntryBound {
		t.Errorf("a negative entry allocates %.0f B with its path: more than %d B", neg, negativeEntryBound)
	}
	// At most 400 B a file entry with its path (issue #33), for the
	// bench's 58-byte paths, a 64-byte object: 336 B besides it. The paths
	// here were made before the measurement and the cache keeps them as
	// they are (a server's request makes its path), so what the cache
	// allocated per entry is file plus the path's length: about 307 B by
	// heap profile, the meta with its Entry (192 B), the header values
	// (64 B), the slots of the paths' index, the directory's name index
	// and the two clocks (about 50 B). fileEntryOwnBound is 336 B where
	// the descriptor is bare, more where it is an *os.File.
	if file > fileEntryOwnBound {
		t.Errorf("a file entry allocates %.0f B besides its path: more than %d B (%d B with a 64-byte path)", file, fileEntryOwnBound, fileEntryOwnBound+64)
	}
}

// negSlotBound is the most a negative entry's slot may take: 40 of the
// 120 B a negative entry may cost with its path.
const negSlotBound = 40

// metaBound is the most a meta may take: with its first Entry (newEntry's
// one allocation) on Linux, 168 + 24 bytes fill the 192-byte size class
// exactly; 8 bytes more and every cached file costs a 208-byte object.
// (The meta is 160 bytes now: one more 8-byte field fits for free.)
const metaBound = 168

// TestEntryLayout holds the per-file structs to the allocator's size
// classes they were fitted into (issue #33: at most 400 B of Go heap per
// cached file): a meta of at most metaBound bytes, an Entry of at most
// entryBound (24 B with a bare descriptor, 32 B with an *os.File), and
// newEntry's allocation of the two no larger than their sum. A field
// added to either must come with a saving elsewhere, or move the bound
// with the figure of TestHeapPerEntry.
func TestEntryLayout(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the bounds are those of a 64-bit platform")
	}
	if got := unsafe.Sizeof(meta{}); got > metaBound {
		t.Errorf("meta is %d B, more than %d B: with its Entry it no longer fits the 192 B size class", got, metaBound)
	}
	if got := unsafe.Sizeof(Entry{}); got > entryBound {
		t.Errorf("Entry is %d B, more than %d B (its size class here)", got, entryBound)
	}
	if got := unsafe.Sizeof(negSlot{}); got > negSlotBound {
		t.Errorf("negSlot is %d B, more than %d B: every cached 404 pays it", got, negSlotBound)
	}
	if got, want := unsafe.Sizeof(metaWithEntry{}), unsafe.Sizeof(meta{})+unsafe.Sizeof(Entry{}); got > want {
		t.Errorf("newEntry allocates %d B for a %d B meta and a %d B Entry: padding between them", got, unsafe.Sizeof(meta{}), unsafe.Sizeof(Entry{}))
	}
}

// BenchmarkMissChurn is e's lookups: cycling through more files than the
// cache keeps descriptors for, so that nearly every one opens its file and
// closes another's descriptor. With the entries kept (MaxEntries above the
// tree) that is a reopen; with MaxEntries as low as MaxOpenFiles, a whole
// miss. -benchmem gives each one's allocations.
func BenchmarkMissChurn(b *testing.B) {
	paths := manyFiles(b, b.TempDir(), 4, 500)
	for _, bc := range []struct {
		name       string
		maxEntries int
	}{{"reopen", 0}, {"miss", 200}} {
		b.Run(bc.name, func(b *testing.B) {
			c := New(Options{Workers: 2, MaxOpenFiles: 200, MaxEntries: bc.maxEntries, Revalidate: time.Hour})
			defer c.Close()
			ctx := context.Background()
			for _, p := range paths { // the entries, made once
				e, err := c.Get(ctx, p)
				if err != nil {
					b.Fatal(err)
				}
				e.Release()
			}
			before := c.Snapshot()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				e, err := c.Get(ctx, paths[i%len(paths)])
				if err != nil {
					b.Fatal(err)
				}
				e.Release()
			}
			b.StopTimer()
			s := c.Snapshot()
			b.ReportMetric(float64(s[Misses]-before[Misses])/float64(b.N), "misses/op")
			b.ReportMetric(float64(s[Reopens]-before[Reopens])/float64(b.N), "reopens/op")
		})
	}
}

// BenchmarkMissingScan is a scanner: every lookup a distinct missing path,
// in a cache whose negative entries are full.
func BenchmarkMissingScan(b *testing.B) {
	dir := b.TempDir()
	c := New(Options{Workers: 2, NegativeEntries: 1000, Revalidate: time.Hour})
	defer c.Close()
	ctx := context.Background()
	for i := range 1000 {
		c.Get(ctx, filepath.Join(dir, fmt.Sprintf("kept-%d", i)))
	}
	paths := make([]string, b.N)
	for i := range paths {
		paths[i] = filepath.Join(dir, fmt.Sprintf("scan-%08d", i))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := c.Get(ctx, paths[i]); !errors.Is(err, fs.ErrNotExist) {
			b.Fatal(err)
		}
	}
}
