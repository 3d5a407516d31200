//go:build linux && !flashserve_portable

package statacc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// idleClosedBound is how long after its last request a descriptor may
// stay open: it keeps its filesystem busy, and `umount` fails until it is
// closed. The janitor's passes are idlePeriod apart, and a descriptor
// lives through one whole period: 2 to 4 s.
const idleClosedBound = 5 * time.Second

// TestIdleDescriptorsClosedWithinFiveSeconds: descriptors on a filesystem
// mounted below the site's root that no request uses are closed within
// 5 s of the last request, so that it can be unmounted (they stayed until
// revalidate, an hour here; 61 s by default), and not before a whole
// period of the janitor went by, and their entries stay (without a
// descriptor); a file asked for all along keeps its entry and descriptor
// (one miss); one a transfer still holds is kept
// while it is held, and closed within 5 s of its release; a descriptor on
// the root's own filesystem is kept, idle or not, as before; once no
// descriptor on another mount is left the janitor sleeps, and a new one
// wakes it again. Needs root, for mount(2).
func TestIdleDescriptorsClosedWithinFiveSeconds(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mount(2) needs root")
	}
	root := t.TempDir()
	media := filepath.Join(root, "media")
	if err := os.Mkdir(media, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", media, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(media, unix.MNT_DETACH) })
	var paths []string
	for i := range 4 {
		p := filepath.Join(media, fmt.Sprintf("f%d.txt", i))
		write(t, p, "content")
		paths = append(paths, p)
	}
	local := filepath.Join(root, "local.txt")
	write(t, local, "content")
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	defer c.Close()
	ctx := context.Background()
	get := func(p string) *Entry {
		t.Helper()
		e, err := c.getConfined(ctx, root, SymlinksFollow, p)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	idle1, idle2, hot, held := paths[0], paths[1], paths[2], paths[3]
	get(local).Release()
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
			e, err := c.getConfined(ctx, root, SymlinksFollow, hot)
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
	stopped := false
	stopHot := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer stopHot()

	time.Sleep(time.Second)
	if n := c.counts[OpenFiles].Load(); n != 5 {
		t.Fatalf("%d descriptors open a second after their last request, want 5: closed before the janitor's period went by", n)
	}
	// present: the path's entry still holds a descriptor.
	present := func(p string) bool {
		m := c.entries.Load(p)
		if m == nil {
			return false
		}
		e := m.open.Load()
		return e != nil && e.file.isOpen()
	}
	for present(idle1) || present(idle2) {
		if time.Since(lastUse) > idleClosedBound {
			t.Fatalf("idle descriptors still open %v after their last request (%d descriptors open)", idleClosedBound, c.counts[OpenFiles].Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, p := range []string{idle1, idle2} {
		if c.entries.Load(p) == nil {
			t.Errorf("%s lost its entry with its idle descriptor: the next request would look it up again", p)
		}
	}
	t.Logf("idle descriptors closed %v after their last request", time.Since(lastUse).Round(time.Millisecond))
	if !present(hot) || !present(held) || !present(local) {
		t.Fatalf("dropped as idle: the hot entry %v, the held one %v, the one on the root's filesystem %v", !present(hot), !present(held), !present(local))
	}
	if n := c.counts[OpenFiles].Load(); n != 3 {
		t.Fatalf("%d descriptors open, want 3 (the hot one, the held one, the root filesystem's)", n)
	}
	time.Sleep(2 * idlePeriod) // two more passes: the held entry is still in use
	if !present(held) {
		t.Fatal("an entry whose descriptor a transfer holds was dropped as idle")
	}
	stopHot()
	heldEntry.Release()
	released := time.Now()
	for c.counts[OpenFiles].Load() != 1 {
		if time.Since(released) > idleClosedBound {
			t.Fatalf("%d descriptors open %v after the last release, want 1 (the root filesystem's)", c.counts[OpenFiles].Load(), idleClosedBound)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the mount's descriptors all closed %v after the last release", time.Since(released).Round(time.Millisecond))
	if !present(local) {
		t.Error("the idle entry on the root's own filesystem was dropped: it is kept until it is stale")
	}
	if got := c.Snapshot()[IdleClosed]; got != 4 {
		t.Errorf("IdleClosed %d, want 4", got)
	}
	if m := c.Snapshot()[Misses]; m != 5 {
		t.Errorf("%d misses, want 5: the hot file was looked up again", m)
	}

	// The janitor sleeps now, though the root's filesystem has a
	// descriptor; a new one on the mount wakes it.
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
	waitFor("a descriptor cached after the janitor slept closed", func() bool { return c.counts[OpenFiles].Load() == 1 })
	t.Logf("a descriptor cached while the janitor slept closed %v after its request", time.Since(again).Round(time.Millisecond))
	if err := unix.Unmount(media, 0); err != nil {
		t.Errorf("umount of the idle mount: %v", err)
	}
}
