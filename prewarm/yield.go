package prewarm

import (
	"context"
	"sync/atomic"
	"time"
)

// busyPoll is how often a read held back while requests are served looks
// again whether they still are.
const busyPoll = 10 * time.Millisecond

// yielder holds a warm-up's reads back while requests are being served:
// then a read (a chunk of a large file, or a batch of small files) needs
// the one lane, so reads go one at a time; otherwise they go at once. A
// read that started before the requests came runs to its end: one chunk
// or batch at most.
type yielder struct {
	busy func() bool
	lane chan struct{} // capacity 1
	// waiting counts the reads held back now.
	waiting atomic.Int32
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

// leave gives the lane back.
func (y *yielder) leave() { <-y.lane }

// wait returns when a read may start, with the func to call when it is
// done, or ctx's error if ctx ends first.
func (y *yielder) wait(ctx context.Context) (release func(), err error) {
	if y == nil || !y.busy() {
		return noRelease, ctx.Err()
	}
	y.waiting.Add(1)
	defer y.waiting.Add(-1)
	tick := time.NewTicker(busyPoll)
	defer tick.Stop()
	for {
		select {
		case y.lane <- struct{}{}:
			return y.leave, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
			if !y.busy() {
				return noRelease, nil
			}
		}
	}
}
