//go:build linux && !flashserve_portable

package statacc

import (
	"path/filepath"
	"testing"
	"time"
)

// TestNegativeCacheFullCreatedFileIsSeen: a file created where an
// admitted negative entry of a full cache says nothing is, is served as
// soon as inotify tells, as in a cache with room.
func TestNegativeCacheFullCreatedFileIsSeen(t *testing.T) {
	delays := newChangeDelays(t)
	root := t.TempDir()
	c, kept := fullNegativeCache(t, root, 100)
	admitted := filepath.Join(root, "created.txt")
	lookMissing(t, c, kept[:1]) // hit: it stays when the admission makes room
	lookMissing(t, c, []string{admitted, admitted})
	for _, p := range []string{admitted, kept[0]} {
		if got := negativeHitsOf(t, c, []string{p}); got != 1 {
			t.Fatalf("%s: not a negative hit before its file is created", p)
		}
		changed := time.Now()
		write(t, p, "new")
		took := delays.seen(t, c, changed, p, "3:new")
		t.Logf("%s seen after %v", filepath.Base(p), took)
	}
}
