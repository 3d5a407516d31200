package flashserve

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/flashserve/caddy-flash-serve/transmit"
)

// TransferLimit bounds the response bodies in flight, as nginx's
// limit_conn does for connections.
type TransferLimit struct {
	// The most bodies one handler sends at once.
	Limit int `json:"limit"`
	// How long a request may wait for a free place before it is answered
	// 503 with Retry-After. 0 answers at once.
	// Default: 0.
	Queue caddy.Duration `json:"queue,omitempty"`
}

// RateLimit paces each response body, as nginx's limit_rate.
type RateLimit struct {
	// The most body bytes per second for one response.
	Rate int64 `json:"rate"`
	// The bytes sent at full speed before pacing starts, as nginx's
	// limit_rate_after.
	// Default: 0.
	After int64 `json:"after,omitempty"`
}

// counters are the process-wide transmission counters behind the metrics
// and the admin stats: atomics, because the hot path updates them.
var counters struct {
	requests, bytes [transmit.NumEngines]atomic.Int64
	// inFlight counts bodies holding a max_transfers place.
	inFlight atomic.Int64
	// limited counts 503s answered because max_transfers was full.
	limited atomic.Int64
	// fdExhausted counts 503s answered because the fd table was full.
	fdExhausted atomic.Int64
	// quiet404 counts 404s the handler wrote itself (quietNotFound).
	quiet404 atomic.Int64
	// begun and ended count the requests the handler took past the fallback
	// and finished: the warm-ups' busy signal (sent).
	begun, ended atomic.Int64
}

// errTransfersFull is why a request found max_transfers full.
var errTransfersFull = errors.New("max_transfers reached: too many response bodies in flight")

// transferSlots is the max_transfers semaphore of one handler.
type transferSlots struct {
	slots chan struct{}
	queue time.Duration
}

func newTransferSlots(l *TransferLimit) *transferSlots {
	if l == nil || l.Limit <= 0 {
		return nil
	}
	return &transferSlots{slots: make(chan struct{}, l.Limit), queue: time.Duration(l.Queue)}
}

// acquire takes a place, waiting at most the queue duration, or until the
// client hangs up. It answers the error to return to Caddy when it fails.
func (ts *transferSlots) acquire(ctx context.Context, w http.ResponseWriter) error {
	select {
	case ts.slots <- struct{}{}:
		counters.inFlight.Add(1)
		return nil
	default:
	}
	if ts.queue > 0 {
		t := time.NewTimer(ts.queue)
		defer t.Stop()
		select {
		case ts.slots <- struct{}{}:
			counters.inFlight.Add(1)
			return nil
		case <-ctx.Done():
			return caddyhttp.Error(statusClientClosedRequest, ctx.Err())
		case <-t.C:
		}
	}
	counters.limited.Add(1)
	// A client told to come back after the queue would have waited has a
	// fair chance of a place; at least one second, as Retry-After counts.
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int((ts.queue+time.Second-1)/time.Second))))
	return caddyhttp.Error(http.StatusServiceUnavailable, errTransfersFull)
}

func (ts *transferSlots) release() {
	counters.inFlight.Add(-1)
	<-ts.slots
}

// pacer spaces the chunks of one response so that, after the first
// `after` bytes, the body leaves at `rate` bytes per second on average.
type pacer struct {
	rate, after int64
	sent        int64
	origin      time.Time // when pacing began; zero before
	ctx         context.Context
}

// next returns how many of the remaining bytes to send before the next
// wait: the rest of the first `after` bytes at once, then an eighth of a
// second's worth, so the rate holds over short bodies too, and at least
// 4 KiB, so that slow rates do not cost a syscall per few bytes.
func (p *pacer) next(remaining int64) int64 {
	if p.sent < p.after {
		return min(remaining, p.after-p.sent)
	}
	return min(remaining, max(p.rate/8, 4096))
}

// wait sleeps until the bytes sent since pacing began are within the
// rate, or the client hangs up.
func (p *pacer) wait() error {
	if p.sent < p.after {
		return nil
	}
	now := time.Now()
	if p.origin.IsZero() {
		p.origin = now
		return nil
	}
	due := p.origin.Add(time.Duration(float64(p.sent-p.after) / float64(p.rate) * float64(time.Second)))
	d := due.Sub(now)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-p.ctx.Done():
		return p.ctx.Err()
	}
}

func (l *TransferLimit) validate() error {
	switch {
	case l == nil:
	case l.Limit < 1:
		return refuse("max_transfers.limit", "need 1 or more, got %d", l.Limit)
	case l.Queue < 0:
		return refuse("max_transfers.queue", "need 0 or more, got %s", time.Duration(l.Queue))
	}
	return nil
}

func (l *RateLimit) validate() error {
	switch {
	case l == nil:
	case l.Rate < 1:
		return refuse("limit_rate.rate", "need 1 byte/s or more, got %s", sizeText(l.Rate))
	case l.After < 0:
		return refuse("limit_rate.after", "need 0 or more, got %s", sizeText(l.After))
	}
	return nil
}
