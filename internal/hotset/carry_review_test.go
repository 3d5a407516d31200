package hotset

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
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

// TestStartSaverDoesNotWaitForTheSavedSet: StartSaver runs in Provision
// (startPrewarm, under the config load), and "start-up never waits" for
// prewarm. Reading and parsing the saved set there makes every start and
// every reload that makes a new cache wait for the hot-set file: a data
// directory on a slow or hung network mount, or a large set (131,072
// entries, about 7 MB of JSON). A FIFO stands for a read that does not
// answer: StartSaver must return without waiting for it.
func TestStartSaverDoesNotWaitForTheSavedSet(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hot.json")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	started := make(chan *Saver, 1)
	go func() { started <- StartSaver(path, NewCounter(nil), 10, 0, time.Hour, nil) }()
	var s *Saver
	select {
	case s = <-started:
	case <-time.After(5 * time.Second):
		t.Error("StartSaver did not return within 5 s while its saved set could not be read yet")
	}
	// Let any reader of the FIFO go (an empty, corrupt set), then stop.
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
			if err == nil {
				f.Write([]byte("{not json"))
				f.Close()
			} else if !errors.Is(err, syscall.ENXIO) && !errors.Is(err, os.ErrNotExist) {
				// Save replaced the FIFO with a regular file: nothing to let go.
				if info, serr := os.Stat(path); serr == nil && info.Mode().IsRegular() {
					return
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	defer close(done)
	if s == nil {
		select {
		case s = <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("StartSaver still blocked 10 s after its FIFO was written")
		}
	}
	s.Stop()
}
