//go:build linux && !flashserve_portable

package statacc

import (
	"bytes"
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
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestInvalidationWithInotify(t *testing.T) {
	delays := newChangeDelays(t)
	for _, ch := range changes {
		t.Run(ch.name, func(t *testing.T) {
			c := New(Options{Workers: 2, Revalidate: time.Hour})
			defer c.Close()
			path := ch.setup(t, t.TempDir())
			if got := describe(t, c, path); got != ch.before {
				t.Fatalf("before: %q, want %q", got, ch.before)
			}
			hits := c.counts.Hits.Load() + c.counts.NegativeHits.Load()
			if got := describe(t, c, path); got != ch.before {
				t.Fatalf("second look: %q, want %q", got, ch.before)
			}
			if c.counts.Hits.Load()+c.counts.NegativeHits.Load() != hits+1 {
				t.Fatalf("the second look was not a cache hit")
			}
			changed := time.Now()
			ch.apply(t, path)
			took := delays.seen(t, c, changed, path, ch.after)
			t.Logf("seen after %v", took)
		})
	}
}

func TestInvalidationUnderLoad(t *testing.T) {
	c := New(Options{Workers: 4, Revalidate: time.Hour})
	defer c.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "hot.txt")
	write(t, path, "v0")
	delays := newChangeDelays(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// Readers hammer the path. They yield after each request, as request
	// goroutines do when they write to a socket; pure spinning would
	// measure the scheduler's time slice, not the cache.
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if e, err := c.Get(ctx, path); err == nil {
					if _, err := e.ReadAll(); err != nil && !errors.Is(err, fs.ErrClosed) {
						t.Errorf("reading a held entry: %v", err)
					}
					e.Release()
				}
				runtime.Gosched()
			}
		}()
	}
	for i := 1; i <= 50; i++ {
		want := "v" + strconv.Itoa(i)
		tmp := path + ".tmp"
		write(t, tmp, want)
		changed := time.Now()
		os.Rename(tmp, path)
		delays.seen(t, c, changed, path, fmt.Sprintf("%d:%s", len(want), want))
	}
	cancel()
	wg.Wait()
}

func TestOverflowFlushes(t *testing.T) {
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	defer c.Close()
	dir := t.TempDir()
	p := filepath.Join(dir, "x")
	write(t, p, "1")
	describe(t, c, p)
	c.watch.handle(-1, 0x4000 /* IN_Q_OVERFLOW */, "")
	if c.entryCount() != 0 {
		t.Fatalf("%d entries survived a queue overflow", c.entryCount())
	}
}

// TestRealQueueOverflowFlushes overflows a real inotify queue: with
// fs.inotify.max_queued_events lowered to 4 for the cache's instance, a
// burst of changes outruns the reader, the kernel queues IN_Q_OVERFLOW,
// and the whole cache is flushed, so that no change lost in the overflow
// leaves a stale entry.
func TestRealQueueOverflowFlushes(t *testing.T) {
	const knob = "/proc/sys/fs/inotify/max_queued_events"
	old, err := os.ReadFile(knob)
	if err != nil {
		t.Fatalf("reading %s: %v", knob, err)
	}
	if os.Geteuid() != 0 {
		t.Skip("lowering fs.inotify.max_queued_events needs root (CI runs as root)")
	}
	if err := os.WriteFile(knob, []byte("4"), 0o644); err != nil {
		t.Fatalf("lowering %s: %v", knob, err)
	}
	// The limit is read when an instance is made: restore it right after.
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	os.WriteFile(knob, old, 0o644)
	defer c.Close()

	dir := t.TempDir()
	p := filepath.Join(dir, "watched.txt")
	write(t, p, "before")
	for round := 0; c.counts.Flushes.Load() == 0; round++ {
		if round == 20 {
			t.Fatal("20 bursts of 500 changes never overflowed a queue of 4 events")
		}
		if got := describe(t, c, p); got == "" {
			t.Fatal("no entry")
		}
		for i := range 500 {
			write(t, filepath.Join(dir, "burst-"+strconv.Itoa(i)), "x")
		}
		time.Sleep(20 * time.Millisecond)
	}
	changed := time.Now()
	write(t, p, "after the overflow")
	delays := newChangeDelays(t)
	delays.allowFlushes = true // the flush is the point
	delays.seen(t, c, changed, p, fmt.Sprintf("%d:%s", len("after the overflow"), "after the overflow"))
	t.Logf("flushes: %d, invalidations: %d", c.counts.Flushes.Load(), c.counts.Invalidations.Load())
}

// TestHeadIsKeptWhereWatched: an entry keeps its file's first HeadSize
// bytes only where inotify watches (so a rewrite in place ends it within
// the event's delay), only when the page cache holds them (a worker never
// waits for the disk for a head), and a rewrite in place gives the next
// entry the new head.
func TestHeadIsKeptWhereWatched(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	content := make([]byte, 5000)
	for i := range content {
		content[i] = byte(i * 7)
	}
	if err := os.WriteFile(p, content, 0o644); err != nil {
		t.Fatal(err)
	}
	// The head is read by an entry's second lookup: look twice.
	head := func(c *Cache) []byte {
		for range 2 {
			e, err := c.Get(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			e.Release()
		}
		e, err := c.Get(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Release()
		return e.Head()
	}

	watched := New(Options{Workers: 1, Revalidate: time.Hour})
	defer watched.Close()
	if h := head(watched); !bytes.Equal(h, content[:headSize]) {
		t.Fatalf("watched: head of %d bytes, want the first %d of the file", len(h), headSize)
	}
	unwatched := New(Options{Workers: 1, NoInotify: true})
	defer unwatched.Close()
	if h := head(unwatched); h != nil {
		t.Fatalf("without inotify: a head of %d bytes; want none", len(h))
	}

	// Rewritten in place, same size: the next entry has the new head.
	for i := range content {
		content[i] = ^content[i]
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	f.WriteAt(content, 0)
	f.Close()
	took := newChangeDelays(t).until(t, watched, changed, "the rewritten head", func() bool {
		return bytes.Equal(head(watched), content[:headSize])
	})
	t.Logf("the rewritten head seen after %v", took)

	// Not in the page cache: no head, and no wait for the disk.
	cold := filepath.Join(dir, "cold")
	if err := os.WriteFile(cold, content, 0o644); err != nil {
		t.Fatal(err)
	}
	evict(t, cold)
	for range 2 {
		e, err := watched.Get(context.Background(), cold)
		if err != nil {
			t.Fatal(err)
		}
		if h := e.Head(); h != nil {
			t.Errorf("a file not in the page cache got a head of %d bytes", len(h))
		}
		e.Release()
	}
}

// TestHeadReadOnlyWhenUsedAgain: a miss does not read the head (on a
// churning tree most entries serve one response, whose body is read whole
// anyway); the entry's second lookup reads it, once, and later lookups
// share it.
func TestHeadReadOnlyWhenUsedAgain(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	content := bytes.Repeat([]byte("0123456789abcdef"), 1000)
	if err := os.WriteFile(p, content, 0o644); err != nil {
		t.Fatal(err)
	}
	c := New(Options{Workers: 1, Revalidate: time.Hour})
	defer c.Close()
	get := func() *Entry {
		e, err := c.Get(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	first := get()
	if h := first.Head(); h != nil {
		t.Fatalf("the miss read a head of %d bytes", len(h))
	}
	if m := c.counts.MemoryBytes.Load(); m != 0 {
		t.Fatalf("%d bytes counted before any head was read", m)
	}
	second := get()
	if second != first {
		t.Fatal("the second lookup resolved the path again")
	}
	h := second.Head()
	if !bytes.Equal(h, content[:headSize]) {
		t.Fatalf("second lookup: head of %d bytes, want the first %d of the file", len(h), headSize)
	}
	if m := c.counts.MemoryBytes.Load(); m != headSize {
		t.Fatalf("%d bytes counted for one head, want %d", m, headSize)
	}
	third := get()
	if h3 := third.Head(); len(h3) != len(h) || &h3[0] != &h[0] {
		t.Fatal("the third lookup read the head again")
	}
	for _, e := range []*Entry{first, second, third} {
		e.Release()
	}
	c.flush()
	if m := c.counts.MemoryBytes.Load(); m != 0 {
		t.Fatalf("%d bytes still counted after a flush", m)
	}
}

// evict drops a file from the page cache and checks with mincore that its
// first page is gone, trying again while something still holds it.
func evict(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Sync()
	for try := 0; ; try++ {
		unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		m, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		vec := make([]byte, 1)
		_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), 4096, uintptr(unsafe.Pointer(&vec[0])))
		unix.Munmap(m)
		if errno != 0 {
			t.Fatal(errno)
		}
		if vec[0]&1 == 0 {
			return
		}
		if try == 20 {
			t.Fatalf("%s stays in the page cache after DONTNEED", path)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
