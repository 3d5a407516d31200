//go:build linux && !flashserve_portable

package statacc

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLinkedEntryIsDroppedWithinTwoSeconds: a file reached through a
// symbolic link is trusted for a second, and its descriptor is given back
// within about two once its target is deleted, though the janitor slept
// on revalidate's longer period when the entry came: the first entry
// trusted briefly wakes it (without it, with revalidate 1h, the
// deleted target's descriptor stayed open for half an hour).
func TestLinkedEntryIsDroppedWithinTwoSeconds(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "target.bin"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("target.bin", filepath.Join(root, "link.bin")); err != nil {
		t.Fatal(err)
	}
	c := New(Options{Revalidate: time.Hour})
	defer c.Close()
	time.Sleep(200 * time.Millisecond) // the janitor is asleep on its Revalidate/2 timer
	e, err := c.getConfined(context.Background(), "", SymlinksFollow, filepath.Join(root, "link.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if e.watched {
		t.Error("an entry reached through a link is trusted until an inotify event that will not come")
	}
	e.Release()
	if err := os.Remove(filepath.Join(root, "target.bin")); err != nil { // an event for target.bin, none for link.bin
		t.Fatal(err)
	}
	waitTargetClosed(t, c)
}

// TestProbedLinkedEntryIsDroppedWithinTwoSeconds: the same for a link
// that is the first path asked for in a directory the watcher does not
// know, while the negative cache is full: probeMissing opens it before
// the directory is entered, and its descriptor must wake the janitor as
// resolve's do (without it the janitor slept on, and the
// deleted target's descriptor stayed open for revalidate/2).
func TestProbedLinkedEntryIsDroppedWithinTwoSeconds(t *testing.T) {
	root := t.TempDir()
	sub := filepath.Join(root, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "target.bin"), make([]byte, 1<<16), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../target.bin", filepath.Join(sub, "link.bin")); err != nil {
		t.Fatal(err)
	}
	c, _ := fullNegativeCache(t, root, 10) // revalidate 1h
	time.Sleep(200 * time.Millisecond)     // the janitor is asleep on its Revalidate/2 timer
	nodes := c.counts[WatchedDirs].Load()
	e, err := c.Get(context.Background(), filepath.Join(sub, "link.bin"))
	if err != nil {
		t.Fatal(err)
	}
	e.Release()
	if e.watched {
		t.Error("an entry reached through a link is trusted until an inotify event that will not come")
	}
	if c.counts[WatchedDirs].Load() == nodes {
		t.Fatal("the lookup entered no directory: it did not go through the probe of a full negative cache")
	}
	if err := os.Remove(filepath.Join(root, "target.bin")); err != nil {
		t.Fatal(err)
	}
	waitTargetClosed(t, c)
}

// TestHardLinkLeavesTheJanitorAsleep: a file with a second name is
// trusted briefly (a write through the other name sends no event for
// this one), but its descriptor needs no janitor: deleting this name is
// an event, and deleting the other leaves this file as it was. So it does
// not put the janitor on a walk of every entry each second (without this
// rule, one hard-linked file did, for the life of the cache).
func TestHardLinkLeavesTheJanitorAsleep(t *testing.T) {
	root := t.TempDir()
	a := filepath.Join(root, "a.txt")
	if err := os.WriteFile(a, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(a, filepath.Join(root, "b.txt")); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []Symlinks{SymlinksFollow, SymlinksBeneath} {
		c := New(Options{Revalidate: time.Hour})
		e, err := c.getConfined(context.Background(), root, mode, a)
		if err != nil {
			t.Fatal(err)
		}
		e.Release()
		if e.watched {
			t.Errorf("%v: a hard-linked file is trusted until an event that a write through its other name does not send", mode)
		}
		if c.sawUnwatched.Load() {
			t.Errorf("%v: a hard-linked file put the janitor on one-second walks", mode)
		}
		c.Close()
	}
}

// waitTargetClosed waits up to 3 s for the cache to hold no descriptor:
// the janitor's one-second walk after the entry's one second of trust.
func waitTargetClosed(t *testing.T, c *Cache) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for c.counts[OpenFiles].Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the deleted target's descriptor is still held 3 s after its deletion (%d open)", c.counts[OpenFiles].Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
