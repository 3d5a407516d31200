//go:build linux && !flashserve_portable

package statacc

import (
	"context"
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
// when statfs says its directory is a tmpfs or ramfs; asked again for
// another file of the same tmpfs, the answer kept for the device holds.
func TestInMemoryFSAsStatfsSays(t *testing.T) {
	dirs := map[string]string{"tmpfs": tmpfsDir(t), "the test's temporary directory": t.TempDir()}
	c := New(Options{Workers: 1, NoInotify: true, MemoryBudget: -1})
	defer c.Close()
	for name, dir := range dirs {
		var sf unix.Statfs_t
		if err := unix.Statfs(dir, &sf); err != nil {
			t.Fatal(err)
		}
		want := sf.Type == unix.TMPFS_MAGIC || sf.Type == unix.RAMFS_MAGIC
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
