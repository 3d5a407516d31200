//go:build linux && !flashserve_portable

package statacc

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// idleClosedBound is how long after its last request a descriptor may
// stay open: it keeps its filesystem busy, and `umount` fails until it is
// closed. The janitor's passes are idlePeriod apart, and a descriptor
// lives through one whole period: 2 to 4 s.
const idleClosedBound = 5 * time.Second

// TestIdleDescriptorsClosedWithinFiveSeconds: descriptors that no request
// uses are closed within 5 s of the last request (they stayed until
// revalidate, an hour here; 61 s by default), and not before a whole
// period of the janitor went by; a file asked for all along keeps its
// entry and descriptor (one miss); one a transfer still holds is kept
// while it is held, and closed within 5 s of its release; once none is
// left the janitor sleeps, and a new descriptor wakes it again. Linux
// only: without inotify an entry is trusted for a second, and dropped
// soon after anyway.
func TestIdleDescriptorsClosedWithinFiveSeconds(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for i := range 4 {
		p := filepath.Join(dir, fmt.Sprintf("f%d.txt", i))
		write(t, p, "content")
		paths = append(paths, p)
	}
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	defer c.Close()
	ctx := context.Background()
	get := func(p string) *Entry {
		t.Helper()
		e, err := c.Get(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	idle1, idle2, hot, held := paths[0], paths[1], paths[2], paths[3]
	get(idle1).Release()
	get(idle2).Release()
	heldEntry := get(held)
	hotEntry := get(hot)
	hotEntry.Release()
	lastUse := time.Now()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			e, err := c.Get(ctx, hot)
			if err != nil {
				t.Error(err)
				return
			}
			if e != hotEntry {
				t.Error("the hot file lost its entry")
			}
			e.Release()
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	time.Sleep(time.Second)
	if n := c.counts.OpenFiles.Load(); n != 4 {
		t.Fatalf("%d descriptors open a second after their last request, want 4: closed before the janitor's period went by", n)
	}
	present := func(p string) bool { _, ok := c.entries.Load(p); return ok }
	for !(!present(idle1) && !present(idle2)) {
		if time.Since(lastUse) > idleClosedBound {
			t.Fatalf("idle entries still cached %v after their last request (%d descriptors open)", idleClosedBound, c.counts.OpenFiles.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("idle descriptors closed %v after their last request", time.Since(lastUse).Round(time.Millisecond))
	if !present(hot) || !present(held) {
		t.Fatalf("the hot entry (cached %v) or the held one (cached %v) was dropped as idle", present(hot), present(held))
	}
	if n := c.counts.OpenFiles.Load(); n != 2 {
		t.Fatalf("%d descriptors open, want 2 (the hot one, the held one)", n)
	}
	time.Sleep(2 * idlePeriod) // two more passes: the held entry is still in use
	if !present(held) {
		t.Fatal("an entry whose descriptor a transfer holds was dropped as idle")
	}
	close(stop)
	wg.Wait()
	stop = make(chan struct{})
	heldEntry.Release()
	released := time.Now()
	for c.counts.OpenFiles.Load() != 0 {
		if time.Since(released) > idleClosedBound {
			t.Fatalf("%d descriptors open %v after the last release", c.counts.OpenFiles.Load(), idleClosedBound)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("all descriptors closed %v after the last release", time.Since(released).Round(time.Millisecond))
	if got := c.Snapshot().IdleClosed; got != 4 {
		t.Errorf("IdleClosed %d, want 4", got)
	}
	if m := c.Snapshot().Misses; m != 4 {
		t.Errorf("%d misses, want 4: the hot file was looked up again", m)
	}

	// The janitor sleeps now; a new descriptor wakes it.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(idleClosedBound)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v", what, idleClosedBound)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("the janitor disarmed", func() bool { return !c.idleArmed.Load() })
	get(idle1).Release()
	again := time.Now()
	waitFor("a descriptor cached after the janitor slept closed", func() bool { return c.counts.OpenFiles.Load() == 0 })
	t.Logf("a descriptor cached while the janitor slept closed %v after its request", time.Since(again).Round(time.Millisecond))
}
