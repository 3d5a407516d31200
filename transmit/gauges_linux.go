//go:build linux && !flashserve_portable

package transmit

// Reads reports the ring's operations in flight (submitted, queued, or
// abandoned and not yet completed) and how many it can hold; 0, 0 for a
// nil ring.
func (r *Ring) Reads() (inFlight, slots int) {
	if r == nil {
		return 0, 0
	}
	return len(r.slots), cap(r.slots)
}
