package transmit

import "time"

// renewer keeps a response's write-idle deadline while one turn of it
// (one ReadFrom call on the connection) is sent in many system calls.
//
// Caddy's write-idle writer sets the deadline before each turn and, when
// it writes itself, cuts the body into turns of max_write_chunk (64 KiB),
// so that a client that keeps reading is never cut. flash_serve's turns
// are sendfile_max_chunk (2 MiB, the fairness bound between connections),
// which a slow client can take longer than the idle timeout to read; the
// renewer pushes the deadline on after every call that made progress, to
// what Caddy's own chunking would have set:
//   - without a minimum rate, now + Timeout (nginx's send_timeout, which
//     also runs between two successive writes);
//   - with write_min_rate, the turn's deadline plus 1/MinRate seconds per
//     byte sent in the turn, so the rate is held over the whole body and
//     its window is never restarted;
//
// and never past the Ceiling (write_timeout), and never earlier than the
// deadline already in force.
type renewer struct {
	pol  idlePolicy
	turn time.Time // deadline in force when the turn began
	cur  time.Time // deadline in force
	step time.Duration
}

// newRenewer starts a turn under policy pol, whose deadline in force is
// turn (the zero time if none). Without a deadline in force or a Timeout,
// it renews nothing: it only ever extends a deadline Caddy set.
func newRenewer(pol idlePolicy, turn time.Time) renewer {
	if turn.IsZero() || pol.Timeout <= 0 {
		return renewer{}
	}
	// A deadline is moved only when it gains at least 1/64 of the timeout
	// (about 1 s of 1 min): a fast client then costs no timer update per
	// call, and a slow one loses at most that much of its allowance.
	return renewer{pol: pol, turn: turn, cur: turn, step: max(pol.Timeout/64, time.Millisecond)}
}

// next returns the deadline to set after sent bytes of the turn went out
// (at time now), and whether it should be set at all.
func (r *renewer) next(now time.Time, sent int64) (time.Time, bool) {
	if r.pol.Timeout <= 0 {
		return time.Time{}, false
	}
	var d time.Time
	if r.pol.MinRate > 0 {
		// Credit in two parts, so that sent*time.Second cannot overflow.
		rate := r.pol.MinRate
		credit := time.Duration(sent/rate)*time.Second + time.Duration(sent%rate)*time.Second/time.Duration(rate)
		d = r.turn.Add(credit)
	} else {
		d = now.Add(r.pol.Timeout)
	}
	if c := r.pol.Ceiling; !c.IsZero() && d.After(c) {
		d = c
	}
	if d.Sub(r.cur) < r.step {
		return time.Time{}, false
	}
	r.cur = d
	return d, true
}
