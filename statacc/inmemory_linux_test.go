//go:build linux && !flashserve_portable

package statacc

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
	"golang.org/x/sys/unix"
)

// tmpfsDir returns a directory on a tmpfs: one mounted for the test when
// root, else /dev/shm where it is a tmpfs.
func tmpfsDir(t *testing.T) string {
	t.Helper()
	if os.Geteuid() == 0 {
		dir := t.TempDir()
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=16m"); err != nil {
			t.Fatalf("mounting a tmpfs: %v", err)
		}
		t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
		return dir
	}
	var sf unix.Statfs_t
	if unix.Statfs("/dev/shm", &sf) != nil || sf.Type != unix.TMPFS_MAGIC {
		t.Skip("not root, and /dev/shm is not a tmpfs: no tmpfs to test on")
	}
	dir, err := os.MkdirTemp("/dev/shm", "statacc-test-")
	if err != nil {
		t.Skip("cannot write to /dev/shm:", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestInMemoryFSAsStatfsSays: an entry is on a memory filesystem exactly
// when statfs says its directory is a tmpfs or ramfs, for each file.
func TestInMemoryFSAsStatfsSays(t *testing.T) {
	dirs := map[string]string{"tmpfs": tmpfsDir(t), "the test's temporary directory": t.TempDir()}
	c := New(Options{Workers: 1, NoInotify: true, MemoryBudget: -1})
	defer c.Close()
	for name, dir := range dirs {
		var sf unix.Statfs_t
		if err := unix.Statfs(dir, &sf); err != nil {
			t.Fatal(err)
		}
		want := int64(sf.Type) == unix.TMPFS_MAGIC || int64(sf.Type) == unix.RAMFS_MAGIC
		for _, file := range []string{"a.bin", "b.bin"} {
			p := filepath.Join(dir, file)
			if err := os.WriteFile(p, make([]byte, 8192), 0o644); err != nil {
				t.Fatal(err)
			}
			e, err := c.Get(context.Background(), p)
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			got := e.InMemoryFS()
			e.Release()
			if got != want {
				t.Errorf("%s (%s, filesystem type %#x): InMemoryFS() = %v, want %v", name, p, sf.Type, got, want)
			}
		}
	}
}

// TestInMemoryFSAfterTheDeviceNumberIsReused: the device number of an
// unmounted tmpfs goes to the next filesystem mounted (the lowest free
// anonymous number). An overlay mounted there is not a tmpfs, and its
// files are not taken for one: an answer kept per device number would
// have said they were (in the whole suite, a tmpfs that took a FUSE
// mount's number was taken for FUSE).
func TestInMemoryFSAfterTheDeviceNumberIsReused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting filesystems needs root")
	}
	mount := func(source, dir, fstype, data string) {
		t.Helper()
		if err := unix.Mount(source, dir, fstype, 0, data); err != nil {
			t.Fatalf("mounting %s on %s: %v", fstype, dir, err)
		}
		t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	}
	// The overlay's own directories, on a tmpfs mounted first, so that it
	// does not take the number the test frees.
	base := t.TempDir()
	mount("tmpfs", base, "tmpfs", "size=16m")
	for _, d := range []string{"lower", "upper", "work"} {
		if err := os.Mkdir(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	devOf := func(p string) uint64 {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Dev
	}
	// A cache per lookup: the first one's descriptor would keep the tmpfs
	// mounted, and its number taken.
	lookup := func(p string) bool {
		t.Helper()
		if err := os.WriteFile(p, make([]byte, 8192), 0o644); err != nil {
			t.Fatal(err)
		}
		c := New(Options{Workers: 1, NoInotify: true, MemoryBudget: -1})
		defer c.Close()
		e, err := c.Get(context.Background(), p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		defer e.Release()
		return e.InMemoryFS()
	}
	tmp := t.TempDir()
	mount("tmpfs", tmp, "tmpfs", "size=16m")
	tmpDev := devOf(tmp)
	if !lookup(filepath.Join(tmp, "a.bin")) {
		t.Fatal("a file on a tmpfs is not InMemoryFS")
	}
	if err := unix.Unmount(tmp, 0); err != nil {
		t.Fatal(err)
	}
	over := t.TempDir()
	mount("overlay", over, "overlay", fmt.Sprintf("lowerdir=%s/lower,upperdir=%s/upper,workdir=%s/work", base, base, base))
	if dev := devOf(over); dev != tmpDev {
		t.Fatalf("the overlay got device %#x, not the unmounted tmpfs's %#x: the test proves nothing", dev, tmpDev)
	}
	if lookup(filepath.Join(over, "b.bin")) {
		t.Error("a file on an overlay that took an unmounted tmpfs's device number is InMemoryFS")
	}
}

// TestColdSmallFileIsReadOnlyOnceCached: a file small enough for the
// memory cache but not in the page cache is not read at its miss, nor is
// a read of it started there (readahead in a worker, where the request's
// own read of a cold body is batched through the ring); once something
// read it, its next lookup keeps it in memory.
func TestColdSmallFileIsReadOnlyOnceCached(t *testing.T) {
	dir := t.TempDir()
	var sf unix.Statfs_t
	if err := unix.Statfs(dir, &sf); err != nil || sf.Type == unix.TMPFS_MAGIC {
		t.Skipf("%s is on a tmpfs (%v): nothing of it leaves the page cache", dir, err)
	}
	p := filepath.Join(dir, "site.css")
	content := []byte(fmt.Sprintf("%08192d", 7))
	write(t, p, string(content))
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	evictVerified(t, fd, int64(len(content)))
	c := New(Options{Workers: 1, Revalidate: time.Hour, MemoryBudget: 1 << 20, MemoryMaxFile: 16 << 10})
	defer c.Close()
	ctx := context.Background()
	e, err := c.Get(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if e.Data() != nil {
		t.Error("kept in memory though not in the page cache: the miss waited for the disk")
	}
	e.Release()
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if _, known := pagecache.WholeCached(fd, int64(len(content)), pagecache.Trusted(fd, info)); known {
		if n, _ := pagecache.Count(fd, int64(len(content))); n != 0 {
			t.Errorf("%d bytes cached after the miss: it started a read of the cold file", n)
		}
	} else {
		t.Log("cachestat cannot tell here: the miss asks with a no-wait read, which starts readahead")
	}
	if _, err := os.ReadFile(p); err != nil {
		t.Fatal(err)
	}
	c.Purge(p, false)
	e, err = c.Get(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Release()
	if string(e.Data()) != string(content) {
		t.Errorf("looked up again once cached: memory holds %d bytes, want the file's %d", len(e.Data()), len(content))
	}
}

// TestColdTreeStopsAskingSmallFilesWithoutCachestat: where cachestat
// cannot tell (a file the server neither owns nor may write), a small
// file's miss asks with a no-wait read, which starts readahead of a cold
// one. While most such reads were refused (a cold tree), 7 misses in 8
// do not ask, and so start no read; the eighth asks, and sees the tree
// warm up.
func TestColdTreeStopsAskingSmallFilesWithoutCachestat(t *testing.T) {
	dir := t.TempDir()
	var sf unix.Statfs_t
	if err := unix.Statfs(dir, &sf); err != nil || sf.Type == unix.TMPFS_MAGIC {
		t.Skipf("%s is on a tmpfs (%v): nothing of it leaves the page cache", dir, err)
	}
	c := New(Options{Workers: 1, Revalidate: time.Hour, MemoryBudget: 1 << 20, MemoryMaxFile: 16 << 10})
	defer c.Close()
	const size = 8 << 10
	// coldEntry is an entry of a new evicted file, as a server that does
	// not own it sees it.
	coldEntry := func(name string) *Entry {
		t.Helper()
		p := filepath.Join(dir, name)
		write(t, p, fmt.Sprintf("%08192d", 1))
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		info, _ := f.Stat()
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		evictVerified(t, int(f.Fd()), size)
		e := newEntry(p, info)
		e.file = fdRef(int(f.Fd())) // f, closed by the cleanup, owns it
		return e
	}
	cachedBytes := func(e *Entry) int64 {
		n, err := pagecache.Count(e.FD(), size)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	buf := make([]byte, size)
	// Misses of evicted files, each asking with a no-wait read, until 17
	// of the last 32 were refused. Not all are: the kernel starts
	// readahead for a no-wait read that misses, and on a fast disk it may
	// be done before the read looks again.
	refused := 0
	for i := 0; bits.OnesCount32(c.smallReadsRefused.Load()) < 17; i++ {
		if i == 200 {
			t.Fatalf("%d of 200 no-wait reads of evicted files refused, none recorded", refused)
		}
		e := coldEntry(fmt.Sprintf("cold%03d", i))
		if _, err := c.readSmall(e, buf, true); errors.Is(err, syscall.EAGAIN) {
			refused++
		}
	}
	if refused < 17 {
		t.Fatalf("%d reads refused, but the history records 17", refused)
	}
	// Asking stops once most of the last 32 were refused.
	c.smallReadTurn.Store(0)
	x := coldEntry("x")
	for turn := 1; turn < 8; turn++ {
		if _, err := c.readSmall(x, buf, true); !errors.Is(err, syscall.EAGAIN) {
			t.Fatalf("miss %d of a cold tree: %v, want EAGAIN without a read", turn, err)
		}
	}
	if n := cachedBytes(x); n != 0 {
		t.Errorf("%d bytes of x cached: a miss that did not ask started a read", n)
	}
	// The tree warms up: the eighth miss asks, and keeps the file.
	if _, err := os.ReadFile(x.path); err != nil {
		t.Fatal(err)
	}
	if n, err := c.readSmall(x, buf, true); err != nil || n != size {
		t.Errorf("the eighth miss: %d bytes, %v; want the whole warm file", n, err)
	}
}

// evictVerified drops the file's pages and waits until mincore (the test
// owns the file: it tells the truth) finds none left. FADV_DONTNEED drains
// only its own CPU's batches of pages just added to the LRU, so on a busy
// machine a page written from another CPU may stay until those drain.
func evictVerified(t *testing.T, fd int, size int64) {
	t.Helper()
	var n int64
	for try := range 50 {
		if err := pagecache.Evict(fd); err != nil {
			t.Fatal(err)
		}
		var err error
		if n, err = pagecache.Count(fd, size); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		time.Sleep(time.Duration(try+1) * time.Millisecond)
	}
	t.Fatalf("%d bytes still cached after 50 FADV_DONTNEED: the test would prove nothing", n)
}
