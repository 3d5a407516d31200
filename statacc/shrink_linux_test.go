//go:build linux && !flashserve_portable

package statacc

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestNegativeStoreGivesBackADeletedDirectory: a storm of missing paths
// in one watched directory, then the directory is deleted. The inotify
// event drops every negative entry of its node in bulk, as a purge of it
// would; the store must give their room back as it does after a purge
// (TestNegativeStoreGivesBackABulkRemoval): arenas at their smallest,
// indexes made anew, the negative clock compacted.
func TestNegativeStoreGivesBackADeletedDirectory(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// No listing: every missing path is an entry in the store.
	c := New(Options{Workers: 2, Revalidate: time.Hour, NegativeEntries: 30000, listAfter: -1})
	defer c.Close()
	paths := missingPaths(dir, "m", 20000)
	lookMissing(t, c, paths)
	if n := c.negatives.len(); n != len(paths) {
		t.Fatalf("%d negatives cached, want %d", n, len(paths))
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.negatives.len() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := c.negatives.len(); n != 0 {
		t.Fatalf("%d negatives left after the directory's deletion", n)
	}
	// The entries leave as each event is handled; their room is given
	// back once the watcher has handled the batch (tidyAfterRemovals), a
	// moment later.
	var bad, ringLen, ringCap int
	var msgs []string
	for {
		bad, msgs = 0, msgs[:0]
		for k := range c.negatives.shards {
			sh := &c.negatives.shards[k]
			sh.mu.RLock()
			if cap(sh.arena) > negArenaMin || len(sh.index.words) != 0 {
				if bad < 3 {
					msgs = append(msgs, fmt.Sprintf("shard %d after the deletion: arena of %d bytes (want at most %d), index of %d words (want 0)",
						k, cap(sh.arena), negArenaMin, len(sh.index.words)))
				}
				bad++
			}
			sh.mu.RUnlock()
		}
		c.negs.mu.Lock()
		ringLen, ringCap = len(c.negs.ring), cap(c.negs.ring)
		c.negs.mu.Unlock()
		if bad == 0 && ringLen == 0 && ringCap <= 2*compactMin || !time.Now().Before(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, m := range msgs {
		t.Error(m)
	}
	if bad > 0 {
		t.Errorf("%d of %d shards kept their peak's room", bad, negShards)
	}
	if ringLen != 0 || ringCap > 2*compactMin {
		t.Errorf("negative clock after the deletion: %d entries in room for %d, want none in room for at most %d", ringLen, ringCap, 2*compactMin)
	}
}

// TestDescriptorClockGivesBackADeletedDirectory: the descriptors' clock
// after a watched directory of cached files is deleted, an inotify bulk
// removal, must be compacted as after a purge of it (tidyRings), not keep
// every dropped entry (its path, its husk) until the next file is cached.
func TestDescriptorClockGivesBackADeletedDirectory(t *testing.T) {
	root := t.TempDir()
	files := manyFiles(t, root, 1, 500)
	c := New(Options{Workers: 2, Revalidate: time.Hour, MaxOpenFiles: 2000})
	defer c.Close()
	for _, p := range files {
		if got := describe(t, c, p); got == "missing" || len(got) > 5 && got[:5] == "error" {
			t.Fatalf("%s: %s", p, got)
		}
	}
	if err := os.RemoveAll(filepath.Dir(files[0])); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.counts[OpenFiles].Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := c.counts[OpenFiles].Load(); n != 0 {
		t.Fatalf("%d descriptors open after the directory's deletion", n)
	}
	// The descriptors close as each event is handled; the clock is tidied
	// once the watcher has handled the batch (tidyAfterRemovals), a moment
	// later.
	var ringLen, ringCap int
	for {
		c.fds.mu.Lock()
		ringLen, ringCap = len(c.fds.ring), cap(c.fds.ring)
		c.fds.mu.Unlock()
		if ringLen == 0 && ringCap <= 2*compactMin || !time.Now().Before(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ringLen != 0 || ringCap > 2*compactMin {
		t.Errorf("descriptor clock after the deletion: %d dropped entries in room for %d, want none in room for at most %d", ringLen, ringCap, 2*compactMin)
	}
}
