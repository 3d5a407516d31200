//go:build linux && !flashserve_portable

package statacc

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// holdSlots takes every filesystem slot of c, so that a lookup that needs
// one waits, and returns the function that gives them back.
func holdSlots(c *Cache) func() {
	for range cap(c.slots) {
		c.slots <- struct{}{}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			for range cap(c.slots) {
				<-c.slots
			}
		})
	}
}

// inflight returns the calls in flight: misses queued or being resolved.
func inflight(c *Cache) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.inflight)
}

// lookups reads the two lookup counters.
func lookups(c *Cache) (slot, cached int64) {
	return c.counts[slotLookups].Load(), c.counts[cachedLookups].Load()
}

func TestCachedMissSkipsTheSlots(t *testing.T) {
	dir := t.TempDir()
	if !localFS(dir) {
		t.Skipf("%s is not on a filesystem that allows cached opens", dir)
	}
	for _, name := range []string{"first", "second", "third", "fourth"} {
		write(t, filepath.Join(dir, name), "content of "+name)
	}
	if err := os.Symlink("second", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	defer c.Close()
	// Not about mounts: a change of the mount table (the watcher's first
	// read among them) makes a lookup meanwhile enter its directory again
	// through a slot.
	detachFromMountTable(c)
	ctx := context.Background()

	// The directory's first miss holds a slot: it is watched and its
	// filesystem asked here.
	e, err := c.Get(ctx, filepath.Join(dir, "first"))
	if err != nil {
		t.Fatal(err)
	}
	e.Release()
	if slot, cached := lookups(c); slot != 1 || cached != 0 {
		t.Fatalf("first miss: %d slot lookups, %d cached, want 1 and 0", slot, cached)
	}

	// With every slot taken, misses in the watched directory whose names
	// the kernel has cached are still answered.
	release := holdSlots(c)
	defer release() // before Close, which waits for the workers, if the test fails
	for _, l := range []struct {
		name string
		root string
		mode Symlinks
	}{{"second", "", SymlinksFollow}, {"third", dir, SymlinksBeneath}, {"fourth", dir, SymlinksDeny}} {
		path := filepath.Join(dir, l.name)
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		e, err := c.getConfined(tctx, l.root, l.mode, path)
		cancel()
		if err != nil {
			t.Fatalf("%s (%v) with every slot taken: %v", l.name, l.mode, err)
		}
		if string(e.Data()) != "content of "+l.name || e.Size() != int64(len("content of "+l.name)) {
			t.Fatalf("%s: data %q, size %d", l.name, e.Data(), e.Size())
		}
		e.Release()
	}
	// A name the kernel knows to be missing (a negative dentry) is
	// answered too, as the slot's lookup answers it.
	missing := filepath.Join(dir, "missing")
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing name: %v, want ErrNotExist", err)
	}
	if slot, cached := lookups(c); slot != 1 || cached != 4 {
		t.Fatalf("after the cached misses: %d slot lookups, %d cached, want 1 and 4", slot, cached)
	}

	// A symlink goes to the slots, where a link may lead: it waits.
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.Get(tctx, filepath.Join(dir, "link")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("link with every slot taken: %v, want DeadlineExceeded", err)
	}
	release()
	// The timed-out lookup's call is resolved (or dropped) by a worker
	// now; the next lookup counts the same either way once it is done.
	deadline := time.Now().Add(10 * time.Second)
	for inflight(c) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	e, err = c.Get(ctx, filepath.Join(dir, "link"))
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Data()) != "content of second" {
		t.Fatalf("link: %q", e.Data())
	}
	e.Release()
	if slot, cached := lookups(c); slot != 2 || cached != 4 {
		t.Fatalf("after the link: %d slot lookups, %d cached, want 2 and 4", slot, cached)
	}
}

func TestUnwatchedMissHoldsASlot(t *testing.T) {
	base := t.TempDir()
	if !localFS(base) {
		t.Skipf("%s is not on a filesystem that allows cached opens", base)
	}
	ctx := context.Background()
	// get looks path up and says whether it was answered within d.
	get := func(c *Cache, path string, d time.Duration) bool {
		t.Helper()
		tctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		e, err := c.Get(tctx, path)
		if errors.Is(err, context.DeadlineExceeded) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		e.Release()
		return true
	}
	const answered, waits = 10 * time.Second, 50 * time.Millisecond
	for _, d := range []string{"a", "b"} {
		if err := os.Mkdir(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"1", "2", "3"} {
			write(t, filepath.Join(base, d, f), "content")
		}
	}
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	defer c.Close()
	// A free slot is taken first, cached or not.
	get(c, filepath.Join(base, "a", "1"), answered)
	get(c, filepath.Join(base, "a", "2"), answered)
	if slot, cached := lookups(c); slot != 2 || cached != 0 {
		t.Fatalf("free slots: %d slot lookups, %d cached, want 2 and 0", slot, cached)
	}
	// b is not watched yet, though its dentries are cached: with every
	// slot taken, its miss waits for one (its watch is made there).
	release := holdSlots(c)
	if get(c, filepath.Join(base, "b", "1"), waits) {
		t.Fatal("a miss in an unwatched directory was answered with every slot taken")
	}
	release()
	get(c, filepath.Join(base, "b", "1"), answered) // the queued lookup's answer
	if _, cached := lookups(c); cached != 0 {
		t.Fatalf("unwatched directory b: %d cached lookups, want 0", cached)
	}
	// Now watched, b's misses go without a slot.
	release = holdSlots(c)
	if !get(c, filepath.Join(base, "b", "2"), answered) {
		t.Fatal("a cached miss in watched b waited")
	}
	if _, cached := lookups(c); cached != 1 {
		t.Fatalf("watched directory b: %d cached lookups, want 1", cached)
	}
	// With every cached lookup's token taken as well, a miss waits.
	for range cap(c.cachedSlots) {
		c.cachedSlots <- struct{}{}
	}
	if get(c, filepath.Join(base, "b", "3"), waits) {
		t.Fatal("a miss was answered with every slot and every cached token taken")
	}
	for range cap(c.cachedSlots) {
		<-c.cachedSlots
	}
	release()
	get(c, filepath.Join(base, "b", "3"), answered)

	// Without inotify, every miss waits for a slot.
	off := New(Options{Workers: 2, Revalidate: time.Hour, NoInotify: true})
	defer off.Close()
	get(off, filepath.Join(base, "a", "1"), answered)
	release = holdSlots(off)
	if get(off, filepath.Join(base, "a", "2"), waits) {
		t.Fatal("inotify off: a miss was answered with every slot taken")
	}
	release()
	get(off, filepath.Join(base, "a", "2"), answered)
	if _, cached := lookups(off); cached != 0 {
		t.Fatalf("inotify off: %d cached lookups, want 0", cached)
	}
}

func TestOnlyLocalFilesystemsOpenCached(t *testing.T) {
	// proc and sysfs are not on the allow-list: they stand here for the
	// filesystems whose open may block on a cached dentry (FUSE, NFS).
	for _, dir := range []string{"/proc/self", "/sys"} {
		if localFS(dir) {
			t.Errorf("localFS(%s) = true, want false", dir)
		}
	}
	dir := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: f_type %#x, localFS %v", dir, st.Type, localFS(dir))
	if uint32(st.Type) == unix.EXT4_SUPER_MAGIC && !localFS(dir) {
		t.Errorf("localFS(%s) on ext4 = false, want true", dir)
	}
}

// TestNulInPathKeepsCachedOpens: a request path with a NUL (GET /a%00)
// while every slot is taken goes to the slots, whose lookup refuses it,
// and leaves cached opens on for every later miss: the kernel's EINVAL
// for it would have turned them off until the process restarts.
func TestNulInPathKeepsCachedOpens(t *testing.T) {
	dir := t.TempDir()
	if !localFS(dir) {
		t.Skipf("%s is not on a filesystem that allows cached opens", dir)
	}
	for _, name := range []string{"first", "second"} {
		write(t, filepath.Join(dir, name), "content of "+name)
	}
	if noCachedOpens.Load() || !cachedOpensWork() {
		t.Skip("this kernel refuses RESOLVE_CACHED: no cached opens to keep")
	}
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	defer c.Close()
	detachFromMountTable(c) // as in TestCachedMissSkipsTheSlots
	t.Cleanup(func() { noCachedOpens.Store(false) })
	ctx := context.Background()
	e, err := c.Get(ctx, filepath.Join(dir, "first")) // watches dir
	if err != nil {
		t.Fatal(err)
	}
	e.Release()

	release := holdSlots(c)
	defer release()
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.Get(tctx, filepath.Join(dir, "first\x00x")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a NUL with every slot taken: %v, want DeadlineExceeded (queued for a slot)", err)
	}
	if noCachedOpens.Load() {
		t.Fatal("a NUL in a path turned cached opens off")
	}
	tctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	e, err = c.Get(tctx, filepath.Join(dir, "second"))
	if err != nil {
		t.Fatalf("a cached miss after the NUL, every slot taken: %v", err)
	}
	if string(e.Data()) != "content of second" {
		t.Fatalf("second: %q", e.Data())
	}
	e.Release()
	release()
	// The NUL's lookup, once a slot is free, refuses it as the slot's
	// lookup refuses any such path.
	if _, err := c.Get(ctx, filepath.Join(dir, "first\x00x")); err == nil {
		t.Fatal("a path with a NUL was found")
	}
}

// TestPathsEINVALKeepsCachedOpens: an EINVAL from a cached open turns
// cached opens off only where openat2 refuses RESOLVE_CACHED itself; on a
// kernel that takes it, the EINVAL was the path's (a name that is not
// UTF-8 in a case-insensitive directory with strict encoding).
func TestPathsEINVALKeepsCachedOpens(t *testing.T) {
	if noCachedOpens.Load() || !cachedOpensWork() {
		t.Skip("this kernel refuses RESOLVE_CACHED")
	}
	t.Cleanup(func() { noCachedOpens.Store(false) })
	noteCachedOpenError(&fs.PathError{Op: "openat2", Path: "/x", Err: unix.EINVAL})
	if noCachedOpens.Load() {
		t.Fatal("an EINVAL for one path turned cached opens off")
	}
	noteCachedOpenError(unix.ENOSYS)
	if !noCachedOpens.Load() {
		t.Fatal("ENOSYS left cached opens on")
	}
}
