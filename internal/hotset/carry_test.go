package hotset

import (
	"path/filepath"
	"testing"
	"time"
)

// TestCarriedSetFadesAcrossRestarts: a saved set that a restarted
// server carries on and saves again, with no request for its files in
// between, fades as it would in one process: each save is followed by a
// decay (halving), and the next process must carry the decayed counts,
// not the counts as saved before that decay. Otherwise a server that
// restarts more often than once per snapshot interval (a crash loop, a
// supervisor's restarts, a deploy every few seconds) never lets a file
// go: deleted, renamed or no longer requested, it keeps its place and
// its share of the budget forever.
func TestCarriedSetFadesAcrossRestarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hot.json")
	if err := Save(path, []File{{Path: "/srv/gone", Size: 10, Hits: 8}}); err != nil {
		t.Fatal(err)
	}
	hits := int64(8)
	for restart := 1; restart <= 5; restart++ {
		var saved []File
		StartSaver(path, NewCounter(nil), 10, 0, time.Hour, func(files []File, err error) {
			if err != nil {
				t.Error(err)
			}
			saved = files
		}).Stop()
		var now int64
		for _, f := range saved {
			if f.Path == "/srv/gone" {
				now = f.Hits
			}
		}
		if saved == nil { // an empty snapshot is not written: the file keeps the last
			set, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range set.Files {
				if f.Path == "/srv/gone" {
					now = f.Hits
				}
			}
			if now > 0 {
				t.Fatalf("restart %d saved nothing but left /srv/gone with %d hits on disk", restart, now)
			}
		}
		t.Logf("restart %d with no request: /srv/gone saved with %d hits", restart, now)
		if want := hits / 2; now > want {
			t.Fatalf("restart %d with no request saved /srv/gone with %d hits, want at most %d (half the %d saved before: the decay that followed that save)", restart, now, want, hits)
		}
		hits = now
	}
}
