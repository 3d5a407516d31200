package hotset

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Saver writes the hottest files of a counter to a file every interval
// and once more when it stops. Each snapshot decays the counts after it
// is taken, so each saved set weighs recent requests most.
type Saver struct {
	path  string
	c     *Counter
	files int
	bytes atomic.Int64
	saved func([]File, error)
	// onDisk says the file holds a set this saver carried on or wrote:
	// only the saver's goroutine uses it.
	onDisk bool
	done   chan struct{}
	wg     sync.WaitGroup
}

// StartSaver starts a saver of snapshots of at most files files and, when
// bytes is positive, as many bytes (Top), carrying on the set path holds
// already (Counter.Carry). After each save it calls saved, if not nil,
// with the files and the error of the write; an empty snapshot is not
// written, and saved is not called for it, but it removes a set the
// saver carried on or wrote before (it has faded out).
func StartSaver(path string, c *Counter, files int, bytes int64, every time.Duration, saved func([]File, error)) *Saver {
	s := &Saver{path: path, c: c, files: files, saved: saved, done: make(chan struct{})}
	s.bytes.Store(bytes)
	c.remember(files)
	s.wg.Go(func() { s.run(every) })
	return s
}

// SetBytes changes the bytes the next snapshots may hold: the budget of
// the warm-up they are for.
func (s *Saver) SetBytes(bytes int64) { s.bytes.Store(bytes) }

// Path is the file the saver writes.
func (s *Saver) Path() string { return s.path }

func (s *Saver) run(every time.Duration) {
	// The saved set is read here, not in StartSaver, so that a config load
	// does not wait for it; a corrupt one is the warm-up's to report.
	if set, err := Load(s.path); err == nil && len(set.Files) > 0 {
		s.c.Carry(set.Files)
		s.onDisk = true
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			s.save()
			return
		case <-t.C:
			s.save()
		}
	}
}

func (s *Saver) save() {
	files := s.c.Top(s.files, s.bytes.Load())
	s.c.Decay()
	if len(files) == 0 {
		// A set this saver carried on or wrote has faded out.
		if s.onDisk {
			if err := os.Remove(s.path); err == nil || errors.Is(err, os.ErrNotExist) {
				s.onDisk = false
			}
		}
		return
	}
	err := Save(s.path, files)
	if err == nil {
		s.onDisk = true
	}
	if s.saved != nil {
		s.saved(files, err)
	}
}

// Stop saves once more and returns when that is done. Call it once.
func (s *Saver) Stop() {
	close(s.done)
	s.wg.Wait()
}
