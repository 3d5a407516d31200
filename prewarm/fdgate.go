package prewarm

import (
	"context"
	"errors"
	"sync"
	"time"
)

// The pauses of a warm-up that found the fd table full, and how long it
// goes on without one successful open before it gives the rest up.
const (
	fdPauseMin = 10 * time.Millisecond
	fdPauseMax = time.Second
	fdGiveUp   = time.Minute
)

// errNoDescriptor marks a file of a batch that was not opened because the
// fd table was full: it goes back to the queue, and is not a failure.
var errNoDescriptor = errors.New("prewarm: the fd table is full")

// fdGate keeps a warm-up from taking the descriptors that the server
// needs: when an open finds the fd table full, or the server says it did
// (Warmer.FDPressure), batches open half as many files, down to one, and
// none opens before a pause, doubled each time; each batch that opens all
// its files lets the next take one more, up to prefetchBatch.
type fdGate struct {
	pressure func() bool

	mu     sync.Mutex
	limit  int           // the files a batch may take now
	pause  time.Duration // the last pause, 0 after a success
	until  time.Time     // no open before
	lastOK time.Time     // the last batch that opened a file
}

func newFDGate(pressure func() bool) *fdGate {
	return &fdGate{pressure: pressure, limit: prefetchBatch, lastOK: time.Now()}
}

// batchLimit is how many files the next batch may take.
func (g *fdGate) batchLimit() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.limit
}

// wait returns when a batch may open files, or with ctx's error.
func (g *fdGate) wait(ctx context.Context) error {
	for {
		g.mu.Lock()
		d := time.Until(g.until)
		g.mu.Unlock()
		if d <= 0 {
			if g.pressure == nil || !g.pressure() {
				return ctx.Err()
			}
			g.backOff()
			continue
		}
		sleep(ctx, d)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// backOff halves the batches and sets the next pause.
func (g *fdGate) backOff() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.backOffLocked()
}

func (g *fdGate) backOffLocked() {
	g.limit = max(1, g.limit/2)
	g.pause = min(fdPauseMax, max(fdPauseMin, 2*g.pause))
	g.until = time.Now().Add(g.pause)
}

// opened records a batch that opened n files and found the table full
// (full) or not. It reports whether the warm-up gives up: the table has
// been full for fdGiveUp with no batch opening a file.
func (g *fdGate) opened(n int, full bool) (giveUp bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if n > 0 {
		g.lastOK = time.Now()
	}
	if full {
		g.backOffLocked()
		return time.Since(g.lastOK) > fdGiveUp
	}
	g.limit = min(prefetchBatch, g.limit+1)
	g.pause = 0
	return false
}
