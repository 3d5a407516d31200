package hotset

import (
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
	done  chan struct{}
	wg    sync.WaitGroup
}

// StartSaver starts a saver of snapshots of at most files files and, when
// bytes is positive, as many bytes (Top), carrying on the set path holds
// already (Counter.Carry). After each save it calls saved,
// if not nil, with the files and the error of the write; an empty
// snapshot is not written, and saved is not called for it.
func StartSaver(path string, c *Counter, files int, bytes int64, every time.Duration, saved func([]File, error)) *Saver {
	s := &Saver{path: path, c: c, files: files, saved: saved, done: make(chan struct{})}
	s.bytes.Store(bytes)
	c.Remember(files)
	// The set saved before this process started is carried on (a corrupt
	// one is reported by the warm-up that reads it, and ignored here).
	if set, err := Load(path); err == nil {
		c.Carry(set.Files)
	}
	s.wg.Add(1)
	go s.run(every)
	return s
}

// SetBytes changes the bytes the next snapshots may hold: the budget of
// the warm-up they are for.
func (s *Saver) SetBytes(bytes int64) { s.bytes.Store(bytes) }

// Path is the file the saver writes.
func (s *Saver) Path() string { return s.path }

func (s *Saver) run(every time.Duration) {
	defer s.wg.Done()
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
		return
	}
	err := Save(s.path, files)
	if s.saved != nil {
		s.saved(files, err)
	}
}

// Stop saves once more and returns when that is done. Call it once.
func (s *Saver) Stop() {
	close(s.done)
	s.wg.Wait()
}
