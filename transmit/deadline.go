package transmit

import "time"

// renewer keeps a response's write-idle deadline while one turn (one
// ReadFrom on the connection) is sent in many system calls. Caddy sets
// the deadline before each turn of max_write_chunk; flash_serve's turns
// are sendfile_max_chunk, which a slow client may take longer than the
// idle timeout to read. After each call that made progress the renewer
// pushes the deadline to what Caddy's own chunking would have set: now +
// Timeout (as nginx's send_timeout), or with write_min_rate the turn's
// deadline plus 1/MinRate seconds per byte sent; never past the Ceiling,
// never earlier than the deadline in force.
type renewer struct {
	pol  idlePolicy
	turn time.Time // deadline in force when the turn began
	cur  time.Time // deadline in force
	step time.Duration
}

// newRenewer starts a turn under pol whose deadline in force is turn; it
// only ever extends a deadline Caddy set.
func newRenewer(pol idlePolicy, turn time.Time) renewer {
	if turn.IsZero() || pol.Timeout <= 0 {
		return renewer{}
	}
	// Moved only by at least 1/64 of the timeout: a fast client costs no
	// timer update per call, a slow one loses at most that much.
	return renewer{pol: pol, turn: turn, cur: turn, step: max(pol.Timeout/64, time.Millisecond)}
}

// next returns the deadline to set after sent bytes of the turn went out,
// and whether to set it.
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
