//go:build !linux || flashserve_portable

package transmit

// Reads reports the ring's operations in flight and how many it can
// hold: 0, 0, there is no ring here.
func (r *Ring) Reads() (inFlight, slots int) { return 0, 0 }
