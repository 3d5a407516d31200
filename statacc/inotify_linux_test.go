//go:build linux && !flashserve_portable

package statacc

import (
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
			hits := c.counts[Hits].Load() + c.counts[NegativeHits].Load()
			if got := describe(t, c, path); got != ch.before {
				t.Fatalf("second look: %q, want %q", got, ch.before)
			}
			if c.counts[Hits].Load()+c.counts[NegativeHits].Load() != hits+1 {
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
	for round := 0; c.counts[Flushes].Load() == 0; round++ {
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
	t.Logf("flushes: %d, invalidations: %d", c.counts[Flushes].Load(), c.counts[Invalidations].Load())
}
