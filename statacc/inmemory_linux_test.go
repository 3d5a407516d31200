//go:build linux && !flashserve_portable

package statacc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

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
