package flashserve

import (
	"github.com/flashserve/caddy-flash-serve/statacc"
	"github.com/flashserve/caddy-flash-serve/transmit"
)

// spanProbe finds, span after span of one body, how much from an offset
// is in the page cache. mincore answers for files the process owns or may
// write (statacc marks them at open); for the others it lies, reporting
// every page resident, so their spans are probed with no-wait reads of
// their ends (transmit.NoWaitProbe) and a span with either end missing
// counts as not resident: it goes to the ring, which waits for the disk
// without holding a thread.
type spanProbe struct {
	fd      int
	trusted bool
	noWait  transmit.NoWaitProbe
}

func newSpanProbe(body *statacc.Entry) spanProbe {
	fd := body.FD()
	return spanProbe{fd: fd, trusted: body.MincoreTrusted(), noWait: transmit.NoWaitProbe{FD: fd}}
}

// resident returns how many of the n bytes from off are in the page cache,
// counted from off: with mincore, up to the first missing page; without,
// n or 0.
func (p *spanProbe) resident(off, n int64) (int64, error) {
	if p.trusted {
		return transmit.ResidentPrefix(p.fd, off, n)
	}
	return p.noWait.Resident(off, n), nil
}

// residentWhole reports whether the whole body is in the page cache: one
// mincore over it where mincore answers, else the ends of every span of
// residencyProbe bytes, stopping at the first missing one.
func residentWhole(body *statacc.Entry) bool {
	p := newSpanProbe(body)
	if p.trusted {
		n, err := p.resident(0, body.Size())
		return err == nil && n == body.Size()
	}
	for off := int64(0); off < body.Size(); off += residencyProbe {
		if n, _ := p.resident(off, min(residencyProbe, body.Size()-off)); n == 0 {
			return false
		}
	}
	return true
}
