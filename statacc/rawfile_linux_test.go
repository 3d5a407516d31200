//go:build linux && !flashserve_portable

package statacc

import (
	"context"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// TestMissKeepsABareDescriptor: a miss that churns the descriptors (more
// files than max_open_files) keeps a bare descriptor, not an *os.File
// (which costs an epoll_ctl, a finalizer and more allocations), reads
// through it as os.File.ReadAt does, and closes it when the entry is
// evicted; a churning miss (with its share of evictions) allocates at most
// 6 times (5.0 measured; 7.6 when this test was written, 8.9 with an
// *os.File).
func TestMissKeepsABareDescriptor(t *testing.T) {
	paths := manyFiles(t, t.TempDir(), 2, 100)
	// No heads: the second request of an entry would read (and allocate) one.
	// MaxEntries as low as MaxOpenFiles: evicted descriptors take their
	// entries along, and the churn is of misses, not of reopens.
	c := New(Options{Workers: 2, MaxOpenFiles: 50, MaxEntries: 50, Revalidate: time.Hour, MemoryBudget: -1})
	defer c.Close()
	ctx := context.Background()

	e, err := c.Get(ctx, paths[0])
	if err != nil {
		t.Fatal(err)
	}
	// A fileRef is a bare descriptor by its type (no *os.File fits in it).
	if !e.file.isOpen() {
		t.Fatal("the entry of a regular file holds no descriptor")
	}
	fd := e.FD()
	buf := make([]byte, 9<<10)
	if n, err := e.File().ReadAt(buf, 0); n != 8<<10 || err != io.EOF {
		t.Errorf("ReadAt past the end: %d, %v; want 8192, io.EOF", n, err)
	}
	if n, err := e.File().ReadAt(buf[:100], 8<<10-100); n != 100 || err != nil {
		t.Errorf("ReadAt of the last 100 bytes: %d, %v", n, err)
	}
	link := "/proc/self/fd/" + strconv.Itoa(fd)
	if target, err := os.Readlink(link); err != nil || target != paths[0] {
		t.Fatalf("descriptor %d is %q (%v), want %s", fd, target, err, paths[0])
	}
	e.Release()

	// A pass over every file evicts the first one and closes its
	// descriptor (its number may be reused, but not for that file).
	for _, p := range paths[1:] {
		e, err := c.Get(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		e.Release()
	}
	if target, err := os.Readlink(link); err == nil && target == paths[0] {
		t.Errorf("descriptor %d of an evicted entry still open on %s", fd, target)
	}

	i := 0
	before := c.Snapshot()
	const runs = 400
	allocs := testing.AllocsPerRun(runs, func() {
		e, err := c.Get(ctx, paths[i%len(paths)])
		i++
		if err != nil {
			t.Fatal(err)
		}
		e.Release()
	})
	s := c.Snapshot()
	// AllocsPerRun calls once more before it counts; hits allocate
	// nothing (BenchmarkGetHit).
	misses := s[Misses] - before[Misses] - 1
	if misses < runs/2 {
		t.Fatalf("%d misses in %d lookups: the descriptors did not churn", misses, runs)
	}
	perMiss := allocs * runs / float64(misses)
	t.Logf("%.2f allocations per lookup, %d misses of %d lookups: %.2f per miss; %d open", allocs, misses, runs, perMiss, s[OpenFiles])
	if s[OpenFiles] > 50 {
		t.Errorf("%d descriptors open, max_open_files 50", s[OpenFiles])
	}
	if perMiss > 6 {
		t.Errorf("%.2f allocations per churning miss, want at most 6 (8.9 with an *os.File)", perMiss)
	}
}

// TestReopenAllocatesOnlyItsEntry: a hit whose descriptor the clock
// closed opens the file again with its path copied on the stack and
// compares the file's description there, so that the only allocation is
// the new descriptor's Entry (BenchmarkMissChurn/reopen).
func TestReopenAllocatesOnlyItsEntry(t *testing.T) {
	dir := t.TempDir()
	if !localFS(dir) {
		t.Skipf("%s is not on a filesystem that allows cached opens: nothing reopens inline", dir)
	}
	paths := manyFiles(t, dir, 2, 100)
	c := New(Options{Workers: 2, MaxOpenFiles: 20, Revalidate: time.Hour, MemoryBudget: -1})
	defer c.Close()
	ctx := context.Background()
	get := func(p string) {
		e, err := c.Get(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		e.Release()
	}
	for range 2 {
		for _, p := range paths {
			get(p)
		}
	}
	// Counted exactly (testing.AllocsPerRun rounds down to a whole number
	// a run), on one P. The count is the process's: the least of three
	// passes leaves out what the watcher allocated for events meanwhile.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	least := math.Inf(1)
	for range 3 {
		before := c.Snapshot()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		const runs = 400
		for i := range runs {
			get(paths[i%len(paths)])
		}
		runtime.ReadMemStats(&m1)
		s := c.Snapshot()
		reopens := s[Reopens] - before[Reopens]
		if reopens != runs || s[Misses] != before[Misses] {
			t.Fatalf("%d reopens and %d misses in %d lookups: want a reopen each", reopens, s[Misses]-before[Misses], runs)
		}
		least = min(least, float64(m1.Mallocs-m0.Mallocs)/float64(reopens))
	}
	t.Logf("%.3f allocations per reopen", least)
	// Evictions, in batches, may add a few of their own.
	if least > 1.1 {
		t.Errorf("%.3f allocations per reopen, want 1 (the Entry)", least)
	}
}
