package transmit

import (
	"testing"
	"time"
)

// TestRenewerKeepsCaddysDeadline: within a turn, the deadline follows
// progress as Caddy's own per-chunk reset would: now+Timeout without a
// minimum rate; the turn's deadline plus 1/MinRate s per byte with one;
// never past the ceiling, never earlier than the deadline in force, and
// nothing at all without a deadline in force or a timeout.
func TestRenewerKeepsCaddysDeadline(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	turn := t0.Add(2 * time.Second)

	r := newRenewer(idlePolicy{Timeout: 2 * time.Second}, turn)
	if _, ok := r.next(t0.Add(10*time.Millisecond), 1000); ok {
		t.Error("moved the deadline by 10 ms, less than the step of Timeout/64")
	}
	if d, ok := r.next(t0.Add(5*time.Second), 1<<20); !ok || !d.Equal(t0.Add(7*time.Second)) {
		t.Errorf("after progress at t0+5s: %v %v, want t0+7s", d, ok)
	}
	if _, ok := r.next(t0.Add(4*time.Second), 2<<20); ok {
		t.Error("moved the deadline earlier")
	}

	ceil := t0.Add(3 * time.Second)
	r = newRenewer(idlePolicy{Timeout: 2 * time.Second, Ceiling: ceil}, turn)
	if d, ok := r.next(t0.Add(5*time.Second), 1); !ok || !d.Equal(ceil) {
		t.Errorf("with a ceiling: %v %v, want the ceiling", d, ok)
	}

	// 64 KiB/s: 1 MiB sent in the turn adds 16 s to the turn's deadline,
	// whenever it was sent (the rate window is the body's, not the turn's).
	r = newRenewer(idlePolicy{Timeout: 2 * time.Second, MinRate: 64 << 10}, turn)
	if d, ok := r.next(t0.Add(time.Hour), 1<<20); !ok || !d.Equal(turn.Add(16*time.Second)) {
		t.Errorf("min rate: %v %v, want the turn's deadline + 16s", d, ok)
	}
	if d, ok := r.next(t0, 3<<20+32<<10); !ok || !d.Equal(turn.Add(48*time.Second+500*time.Millisecond)) {
		t.Errorf("min rate, 3.03 MiB: %v %v, want the turn's deadline + 48.5s", d, ok)
	}

	for _, r := range []renewer{newRenewer(idlePolicy{Timeout: 2 * time.Second}, time.Time{}), newRenewer(idlePolicy{}, turn)} {
		if _, ok := r.next(t0.Add(time.Minute), 1<<20); ok {
			t.Error("renewed without a deadline in force or without a timeout")
		}
	}
}
