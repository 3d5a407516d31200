package statacc

import (
	"github.com/flashserve/caddy-flash-serve/internal/proctest"

	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// describe returns what a Get of path says now: its size and content, or
// "missing".
func describe(t testing.TB, c *Cache, path string) string {
	t.Helper()
	return describeConfined(t, c, "", SymlinksFollow, path)
}

// describeConfined is describe for a lookup confined below root.
func describeConfined(t testing.TB, c *Cache, root string, mode Symlinks, path string) string {
	t.Helper()
	e, err := c.getConfined(context.Background(), root, mode, path)
	if errors.Is(err, fs.ErrNotExist) {
		return "missing"
	}
	if err != nil {
		return "error: " + err.Error()
	}
	defer e.Release()
	if e.IsDir() {
		return "dir"
	}
	b, err := e.ReadAll()
	if err != nil {
		return "read error: " + err.Error()
	}
	return fmt.Sprintf("%d:%s", e.size, b)
}

// within polls until describe gives want, and fails after limit.
func within(t testing.TB, limit time.Duration, c *Cache, path, want string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		got := describe(t, c, path)
		if got == want {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("%s: still %q after %v, want %q", path, got, limit, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

type change struct {
	name string
	// setup prepares the tree under dir and returns the path to watch.
	setup func(t *testing.T, dir string) string
	// before is what Get says after setup; after is what it must say once
	// the change is seen.
	before, after string
	apply         func(t *testing.T, path string)
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

var changes = []change{
	{
		name:   "rewritten in place",
		setup:  func(t *testing.T, dir string) string { p := filepath.Join(dir, "a.txt"); write(t, p, "old"); return p },
		before: "3:old", after: "5:newer",
		apply: func(t *testing.T, p string) {
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString("newer")
			f.Close()
		},
	},
	{
		name:   "replaced by rename",
		setup:  func(t *testing.T, dir string) string { p := filepath.Join(dir, "b.txt"); write(t, p, "old"); return p },
		before: "3:old", after: "7:renamed",
		apply: func(t *testing.T, p string) {
			tmp := p + ".tmp"
			write(t, tmp, "renamed")
			if err := os.Rename(tmp, p); err != nil {
				t.Fatal(err)
			}
		},
	},
	{
		name:   "deleted",
		setup:  func(t *testing.T, dir string) string { p := filepath.Join(dir, "c.txt"); write(t, p, "here"); return p },
		before: "4:here", after: "missing",
		apply: func(t *testing.T, p string) { os.Remove(p) },
	},
	{
		name:   "created where a 404 was cached",
		setup:  func(t *testing.T, dir string) string { return filepath.Join(dir, "d.txt") },
		before: "missing", after: "3:new",
		apply: func(t *testing.T, p string) { write(t, p, "new") },
	},
	{
		name: "directory removed",
		setup: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "sub", "deeper", "e.txt")
			write(t, p, "deep")
			return p
		},
		before: "4:deep", after: "missing",
		apply: func(t *testing.T, p string) {
			if err := os.RemoveAll(filepath.Dir(filepath.Dir(p))); err != nil {
				t.Fatal(err)
			}
		},
	},
	{
		name: "truncated",
		setup: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "f.txt")
			write(t, p, "longer")
			return p
		},
		before: "6:longer", after: "0:",
		apply: func(t *testing.T, p string) {
			if err := os.Truncate(p, 0); err != nil {
				t.Fatal(err)
			}
		},
	},
}

func TestInvalidationByRevalidateWithoutInotify(t *testing.T) {
	const revalidate = 300 * time.Millisecond
	for _, ch := range changes {
		t.Run(ch.name, func(t *testing.T) {
			c := New(Options{Workers: 2, Revalidate: revalidate, NoInotify: true})
			defer c.Close()
			path := ch.setup(t, t.TempDir())
			// The entry is checked during this Get, so not before looked:
			// on a loaded machine the change below can come much later.
			looked := time.Now()
			if got := describe(t, c, path); got != ch.before {
				t.Fatalf("before: %q, want %q", got, ch.before)
			}
			ch.apply(t, path)
			// Without inotify the cache is honestly stale until revalidate.
			// (Data of open descriptors can show through earlier for writes
			// in place, so only a changed name is checked for staleness.)
			if ch.name == "deleted" || ch.name == "created where a 404 was cached" || ch.name == "replaced by rename" {
				if got := describe(t, c, path); got != ch.before && time.Since(looked) < revalidate/2 {
					t.Fatalf("changed before revalidate: %q", got)
				}
			}
			// Generous slack on top of revalidate: this is a bound, not a timing.
			within(t, revalidate+400*time.Millisecond, c, path, ch.after)
		})
	}
}

func TestColdStormBoundsThreadsAndCleansUp(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	dir := t.TempDir()
	const files = 10000
	for i := range files {
		write(t, filepath.Join(dir, fmt.Sprintf("d%02d", i%50), fmt.Sprintf("f%05d", i)), "x")
	}
	runtime.GC()
	fds0, goroutines0 := proctest.FDs(t), runtime.NumGoroutine()
	threads0 := proctest.Threads(t)

	const workers = 8
	c := New(Options{Workers: workers, queueLength: files, MaxOpenFiles: 500})
	var wg sync.WaitGroup
	var mu sync.Mutex
	peak := 0
	errs := map[string]int{}
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			n := proctest.Threads(t)
			mu.Lock()
			peak = max(peak, n)
			mu.Unlock()
			select {
			case <-stopSampling:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	for i := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, err := c.Get(context.Background(), filepath.Join(dir, fmt.Sprintf("d%02d", i%50), fmt.Sprintf("f%05d", i)))
			if err != nil {
				mu.Lock()
				errs[err.Error()]++
				mu.Unlock()
				return
			}
			e.Release()
		}()
	}
	wg.Wait()
	close(stopSampling)
	<-sampled
	if len(errs) > 0 {
		t.Fatalf("errors in the storm: %v", errs)
	}
	if open := c.counts[OpenFiles].Load(); open > 500 {
		t.Fatalf("%d descriptors open, max_open_files is 500", open)
	}
	// Threads: those the process had, the workers, and the runtime's own
	// (sysmon, GC workers, the netpoller, a few spares).
	if limit := threads0 + workers + 2*runtime.GOMAXPROCS(0) + 8; peak > limit {
		t.Fatalf("peak %d threads for %d concurrent misses; bound %d", peak, files, limit)
	}
	t.Logf("peak threads %d (started with %d), %d misses, %d merged", peak, threads0, c.counts[Misses].Load(), c.counts[Merged].Load())

	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		fds, g := proctest.FDs(t), runtime.NumGoroutine()
		if fds <= fds0 && g <= goroutines0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Close: %d fds (was %d), %d goroutines (was %d)", fds, fds0, g, goroutines0)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestQueueFullAndCanceledWaiters(t *testing.T) {
	dir := t.TempDir()
	c := New(Options{Workers: 1, queueLength: 1, NoInotify: true})
	defer c.Close()
	// Stop the worker and take the slots, so that misses stay queued and
	// nothing depends on timing; Close then has a fresh channel to close.
	close(c.stop)
	c.wg.Wait()
	c.stop = make(chan struct{})
	// Take every filesystem slot, so that no miss can resolve inline.
	for range cap(c.slots) {
		c.slots <- struct{}{}
	}

	// A waiter whose client hangs up leaves at once with its context's error.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.Get(ctx, filepath.Join(dir, "first")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiter with an expired context: %v, want DeadlineExceeded", err)
	}
	// The queue (length 1) is now full: the next miss is refused, not queued.
	if _, err := c.Get(context.Background(), filepath.Join(dir, "second")); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("miss with a full queue: %v, want ErrQueueFull", err)
	}
	if c.counts[QueueFull].Load() != 1 {
		t.Fatalf("QueueFull = %d, want 1", c.counts[QueueFull].Load())
	}
	// A miss for the queued path merges with it instead of queueing again.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	c.Get(ctx2, filepath.Join(dir, "first"))
	if c.counts[Merged].Load() != 1 {
		t.Fatalf("Merged = %d, want 1", c.counts[Merged].Load())
	}
}

func TestEntryRefcountDefersClose(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	write(t, p, "content")
	c := New(Options{Workers: 1, NoInotify: true})
	defer c.Close()
	e, err := c.Get(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	c.Purge(p, false) // the cache lets go while a transfer still reads
	buf := make([]byte, 7)
	if _, err := e.File().ReadAt(buf, 0); err != nil || string(buf) != "content" {
		t.Fatalf("read after invalidation: %q, %v", buf, err)
	}
	e.Release()
	if _, err := e.File().ReadAt(buf, 0); err == nil {
		t.Fatal("descriptor still open after the last release")
	}
	if n := c.counts[OpenFiles].Load(); n != 0 {
		t.Fatalf("OpenFiles = %d after the last release", n)
	}
}

func TestEvictionKeepsRecentlyUsed(t *testing.T) {
	dir := t.TempDir()
	c := New(Options{Workers: 1, MaxOpenFiles: 10, NoInotify: true, MemoryBudget: -1})
	defer c.Close()
	hot := filepath.Join(dir, "hot")
	write(t, hot, "h")
	describe(t, c, hot)
	for i := range 40 {
		p := filepath.Join(dir, strconv.Itoa(i))
		write(t, p, "x")
		describe(t, c, p)
		describe(t, c, hot) // keep it used
	}
	if n := c.counts[OpenFiles].Load(); n > 10 {
		t.Fatalf("%d descriptors open with max_open_files 10", n)
	}
	hits := c.counts[Hits].Load()
	describe(t, c, hot)
	if c.counts[Hits].Load() != hits+1 {
		t.Fatal("the hot entry was evicted")
	}
}

func TestGetHitAllocatesNothing(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	write(t, p, "x")
	c := New(Options{Workers: 1})
	defer c.Close()
	describe(t, c, p)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		e, err := c.Get(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		e.Release()
	})
	if allocs != 0 {
		t.Fatalf("a hit allocates %v times", allocs)
	}
}

func BenchmarkGetHit(b *testing.B) {
	dir := b.TempDir()
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("x"), 0o644)
	c := New(Options{Workers: 1})
	defer c.Close()
	ctx := context.Background()
	e, _ := c.Get(ctx, p)
	e.Release()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			e, err := c.Get(ctx, p)
			if err != nil {
				b.Fatal(err)
			}
			e.Release()
		}
	})
}

// TestStaleDescriptorOfDeletedFileIsClosed: without inotify the cache
// cannot see a deletion, but it must not keep the deleted file (and its
// disk space) open for ever when nobody asks for it again. The janitor
// closes the descriptor of a stale entry within about twice the staleness
// bound; a transfer that still holds a reference keeps reading until it
// releases it.
func TestStaleDescriptorOfDeletedFileIsClosed(t *testing.T) {
	dir := t.TempDir()
	idle := filepath.Join(dir, "idle")
	busy := filepath.Join(dir, "busy")
	write(t, idle, "idle")
	write(t, busy, "busy")
	c := New(Options{Workers: 1, Revalidate: 200 * time.Millisecond, NoInotify: true, MemoryBudget: -1})
	defer c.Close()
	describe(t, c, idle)
	held, err := c.Get(context.Background(), busy)
	if err != nil {
		t.Fatal(err)
	}
	if n := c.counts[OpenFiles].Load(); n != 2 {
		t.Fatalf("OpenFiles = %d, want 2", n)
	}
	os.Remove(idle)
	os.Remove(busy)
	// The janitor drops the two entries one after the other: wait for
	// both, not for the idle descriptor's close alone.
	deadline := time.Now().Add(3 * time.Second)
	for c.counts[OpenFiles].Load() > 1 || c.entryCount() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("3 s after the deletion: OpenFiles = %d, %d entries left; want the idle file's descriptor closed and both stale entries dropped", c.counts[OpenFiles].Load(), c.entryCount())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := c.counts[OpenFiles].Load(); n != 1 {
		t.Fatalf("OpenFiles = %d with the busy entry still held, want 1", n)
	}
	buf := make([]byte, 4)
	if _, err := held.File().ReadAt(buf, 0); err != nil || string(buf) != "busy" {
		t.Fatalf("a held entry's read after the janitor ran: %q, %v", buf, err)
	}
	held.Release()
	if n := c.counts[OpenFiles].Load(); n != 0 {
		t.Fatalf("OpenFiles = %d after the last release", n)
	}
}

// TestResidentAndProbeStampsLastASecond: the page-cache stamps of an
// entry (4-byte milliseconds that wrap, compared modulo 2^32): a file
// marked resident is recently resident for a second, and one caller per
// second claims the probe.
func TestResidentAndProbeStampsLastASecond(t *testing.T) {
	var m meta
	if m.RecentlyResident() {
		t.Fatal("an entry never marked is recently resident")
	}
	if !m.ClaimProbe() {
		t.Fatal("the first probe of an entry is refused")
	}
	if m.ClaimProbe() {
		t.Fatal("a second probe within the second is claimed")
	}
	m.MarkResident()
	if !m.RecentlyResident() {
		t.Fatal("an entry just marked resident is not recently resident")
	}
	// A second ago (the subtraction wraps as the stamps do).
	m.residentAt.Store(stampNow() - residentFor)
	m.probedAt.Store(stampNow() - residentFor)
	if m.RecentlyResident() {
		t.Error("an entry marked resident a second ago is still recently resident")
	}
	if !m.ClaimProbe() {
		t.Error("the probe of an entry last probed a second ago is refused")
	}
}

// TestProbeClaimedByALaterClockReadingIsNotClaimedAgain: a caller that
// read the clock and was then overtaken by another whose claim stamped a
// later millisecond does not claim the probe again (a stamp ahead of its
// now is not 49 days old), and does not move probedAt back.
func TestProbeClaimedByALaterClockReadingIsNotClaimedAgain(t *testing.T) {
	var m meta
	ahead := stampNow() + 5 // claimed by a caller whose clock read came 5 ms later
	m.probedAt.Store(ahead)
	if m.ClaimProbe() {
		t.Error("a probe claimed 5 ms after this caller read the clock is claimed again")
	}
	if got := m.probedAt.Load(); got != ahead {
		t.Errorf("probedAt moved from %d to %d", ahead, got)
	}
}
