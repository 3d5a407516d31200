//go:build linux && !flashserve_portable

package transmit

import "github.com/flashserve/caddy-flash-serve/internal/ringtest"

// The tests of the handler look into the shared ring through ringtest.
func init() {
	holder := func() *ringHolder {
		var h *ringHolder
		rings.Range(func(_, v any) bool { h = v.(*ringHolder); return false })
		return h
	}
	ringtest.Shared = func() (bool, error) {
		h := holder()
		if h == nil {
			return false, nil
		}
		return h.ring != nil, h.err
	}
	ringtest.Busy = func() (int, int) {
		if r := SharedRing(); r != nil {
			return r.busy()
		}
		return 0, 0
	}
	ringtest.Workers = func() int {
		if r := SharedRing(); r != nil {
			return r.workerCap()
		}
		return 0
	}
	ringtest.Done = func() <-chan struct{} {
		if r := SharedRing(); r != nil {
			return r.torndown()
		}
		return nil
	}
	ringtest.InjectFailures = func(n int) {
		if r := SharedRing(); r != nil {
			r.injectFailures(n)
		}
	}
	ringtest.ColdChunksLent = func() int { return len(coldBudget) }
	ringtest.ColdChunk = coldChunk
}
