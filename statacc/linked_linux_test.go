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
// trusted briefly wakes it (helper-2's review: with revalidate 1h the
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
	e, err := c.GetConfined(context.Background(), "", SymlinksFollow, filepath.Join(root, "link.bin"))
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
	deadline := time.Now().Add(3 * time.Second)
	for c.counts.OpenFiles.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the deleted target's descriptor is still held 3 s after its deletion (%d open)", c.counts.OpenFiles.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
