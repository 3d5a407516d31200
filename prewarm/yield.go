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
// (and, with cold set, do not wait for the disk themselves): then a read (a chunk of a large file, or a batch of small files) needs
// the one lane, so reads go one at a time; otherwise they go at once. A
// read that started before the requests came runs to its end: one chunk
// or batch at most.
type yielder struct {
	busy func() bool
	// cold, if set, says the requests wait for the disk: reads then go at
	// once, as with no request (Warmer.Cold).
	cold func() bool
	lane chan struct{} // capacity 1
	// waiting counts the reads held back now.
	waiting atomic.Int32
	// cpu is the calling thread's CPU clock, nil where there is none;
	// pause waits, or returns early when ctx ends. A read that holds the
	// lane (a batch of small files, a chunk of a large one read with
	// pread) pauses for factor times the CPU it took (charge): busyPause,
	// or backgroundPause for a Background warm-up.
	cpu    func() time.Duration
	pause  func(context.Context, time.Duration)
	factor time.Duration
	// budget, if set, bounds the bytes the reads that hold the lane take
	// per second (Warmer.BusyRate).
	budget *byteBudget
}

// busyPause is how long, in CPU time taken, a read while requests are
// served holds the lane idle after it: a warm-up takes at most a
// quarter of a core from the requests, and all the disk time they leave.
const busyPause = 3

// backgroundPause is busyPause for a Background warm-up: a twentieth of a
// core while requests are served, as `nice 19` would give it. Why so
// little: what it reads (the rest of the tree, a set that is mostly
// resident) is not what the requests beside it wait for, and on a server
// that is busy for good it still gets through 100,000 small files in
// about a minute.
const backgroundPause = 19

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

// yielderKey carries a Warmer's yielder to readPrefix, which reads each
// chunk of a large file; a batch of small files takes the lane once, in
// warmBatch.
type yielderKey struct{}

func yielderFrom(ctx context.Context) *yielder {
	y, _ := ctx.Value(yielderKey{}).(*yielder)
	return y
}

func noRelease() {}

// charge starts counting the CPU the calling thread takes for a read that
// holds the lane (held: requests are being served); the func it returns
// pauses, lane still held, for factor times that CPU, so that a warm-up
// takes at most 1/(1+factor) of a core from the requests. A
// read's waits for the disk cost no CPU, so they earn no pause: the disk
// is not left idle for them. The thread is locked while the read runs so
// that its CPU clock is the read's, and let go before the pause. Nothing
// is counted without the lane or without a clock.
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
// while no read takes from it, so that a read after a pause (or after an
// idle spell, whose reads take nothing) starts at once and the next waits
// for it: in any span of t seconds the reads that start take at most
// perSec·t bytes and one read more.
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

// pace waits, lane held, until the budget has room for a read of n bytes
// that holds the lane. The wait ends early when requests stop being
// served (the read then goes on at once, as any read does with the server
// idle) or ctx ends.
func (y *yielder) pace(ctx context.Context, n int64) {
	if y.budget == nil || n <= 0 {
		return
	}
	for d := y.budget.take(n); d > 0 && ctx.Err() == nil && y.mustTakeTurns(); d -= busyPoll {
		y.pause(ctx, min(d, busyPoll))
	}
}
