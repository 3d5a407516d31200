//go:build unix

package hotset

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

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
