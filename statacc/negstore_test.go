package statacc

import (
	"context"
	"errors"
	"io/fs"
	"reflect"
	"runtime"
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
// entry (its slot, the index from hash to slot, the arena's bytes) holds
// no pointer, so that a cache full of 404s adds nothing to the
// collector's marking; the watcher's index of them (hash to seq) neither.
func TestNegativeStoreHoldsNoPointers(t *testing.T) {
	var sh negShard
	for _, ty := range []reflect.Type{
		reflect.TypeFor[negSlot](),
		reflect.TypeOf(sh.index).Key(), reflect.TypeOf(sh.index).Elem(),
		reflect.TypeOf(sh.chunks).Elem().Elem(),
		reflect.TypeOf(sh.arena).Elem(),
		reflect.TypeOf(sh.free).Elem(),
		reflect.TypeFor[negRef](),
		reflect.TypeFor[map[uint64]uint64]().Elem(),
	} {
		if hasPointers(ty) {
			t.Errorf("%v holds pointers", ty)
		}
	}
}

// BenchmarkNegativeHit looks up, in turn, each of 50,000 missing paths
// whose 404s are cached (the bench's g): one shard's read lock, no
// allocation, no system call.
func BenchmarkNegativeHit(b *testing.B) {
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	defer c.Close()
	paths := missingPaths(b.TempDir(), "m", 50000)
	ctx := context.Background()
	describe(b, c, paths[0]) // the watcher's nodes, the doorkeeper-free store
	before := float64(heapAfterGC())
	for _, p := range paths[1:] {
		if _, err := c.Get(ctx, p); !errors.Is(err, fs.ErrNotExist) {
			b.Fatal(err)
		}
	}
	pathBytes := 0
	for _, p := range paths[1:] {
		pathBytes += len(p)
	}
	perEntry := (float64(heapAfterGC()) - before - float64(pathBytes)) / float64(len(paths)-1)
	misses := c.counts.Misses.Load()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := c.Get(ctx, paths[i]); !errors.Is(err, fs.ErrNotExist) {
			b.Fatal(err)
		}
		if i++; i == len(paths) {
			i = 0
		}
	}
	b.ReportMetric(float64(c.counts.Misses.Load()-misses)/float64(b.N), "misses/op")
	b.ReportMetric(perEntry, "heapB/negative")
}
