package prewarm

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// busyPoll is how often a read held back while requests are served looks
// again whether they still are.
const busyPoll = 10 * time.Millisecond

// yielder holds a warm-up's reads back while requests are being served
// (and do not wait for the disk themselves): then a read (a chunk of a
// large file, or a batch of small files) needs the one lane, so reads go
// one at a time; otherwise they go at once.
type yielder struct {
	busy    func() bool
	cold    func() bool   // Warmer.Cold
	lane    chan struct{} // capacity 1
	waiting atomic.Int32  // the reads held back now
	// cpu is the calling thread's CPU clock, nil where there is none;
	// pause waits, or returns early when ctx ends. A read that holds the
	// lane pauses for factor times the CPU it took (charge).
	cpu    func() time.Duration
	pause  func(context.Context, time.Duration)
	factor time.Duration
	budget *byteBudget // Warmer.BusyRate, if set
}

// busyPause is how long, in CPU time taken, a read while requests are
// served holds the lane idle after it: a warm-up takes at most a quarter
// of a core from the requests, and all the disk time they leave.
// backgroundPause is that of a Background warm-up, a twentieth of a core:
// what it reads is not what the requests beside it wait for.
const (
	busyPause       = 3
	backgroundPause = 19
)

// sleep waits for d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func noRelease() {}

// charge starts counting the CPU the calling thread takes for a read that
// holds the lane (held); the func it returns pauses, lane still held, for
// factor times that CPU, so that a warm-up takes at most 1/(1+factor) of
// a core from the requests. Waits for the disk cost no CPU and earn no
// pause: the disk is not left idle for them. The thread is locked while
// the read runs so that its CPU clock is the read's.
func (y *yielder) charge(ctx context.Context, held bool) (pay func()) {
	if y == nil || !held || y.cpu == nil {
		return noRelease
	}
	runtime.LockOSThread()
	start := y.cpu()
	return func() {
		took := y.cpu() - start
		runtime.UnlockOSThread()
		y.pause(ctx, y.factor*took)
	}
}

// mustTakeTurns reports whether reads take the lane: requests are being
// served, and they are not waiting for the disk themselves.
func (y *yielder) mustTakeTurns() bool {
	return y.busy() && (y.cold == nil || !y.cold())
}

// leave gives the lane back.
func (y *yielder) leave() { <-y.lane }

// wait returns when a read of n bytes may start, with the func to call
// when it is done, or ctx's error if ctx ends first; held says the read
// holds the lane (requests are being served).
func (y *yielder) wait(ctx context.Context, n int64) (release func(), held bool, err error) {
	if y == nil || !y.mustTakeTurns() {
		return noRelease, false, ctx.Err()
	}
	y.waiting.Add(1)
	defer y.waiting.Add(-1)
	tick := time.NewTicker(busyPoll)
	defer tick.Stop()
	for {
		select {
		case y.lane <- struct{}{}:
			y.pace(ctx, n)
			return y.leave, true, nil
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-tick.C:
			if !y.mustTakeTurns() {
				return noRelease, false, nil
			}
		}
	}
}

// byteBudget is a token bucket of bytes per second, kept as the time by
// which the bytes taken so far are paid for: a read may start once that
// time has come, and pushes it on by its own bytes. It saves nothing up
// while idle, so in any span of t seconds the reads that start take at
// most perSec·t bytes and one read more.
type byteBudget struct {
	perSec int64
	now    func() time.Time
	mu     sync.Mutex
	paid   time.Time
}

// take counts n bytes and returns how long to wait before reading them.
func (b *byteBudget) take(n int64) time.Duration {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.paid.Before(now) {
		b.paid = now
	}
	wait := b.paid.Sub(now)
	b.paid = b.paid.Add(time.Duration(float64(n) / float64(b.perSec) * float64(time.Second)))
	return wait
}

// pace waits, lane held, until the budget has room for a read of n bytes.
// The wait ends early when requests stop being served or ctx ends.
func (y *yielder) pace(ctx context.Context, n int64) {
	if y.budget == nil || n <= 0 {
		return
	}
	for d := y.budget.take(n); d > 0 && ctx.Err() == nil && y.mustTakeTurns(); d -= busyPoll {
		y.pause(ctx, min(d, busyPoll))
	}
}
