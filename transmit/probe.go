package transmit

import (
	"time"

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// residencyProbe is the span probed at a time (pagecache.Probe): what is
// resident in it goes out with sendfile (or pread), what is not is read
// through the ring.
const residencyProbe = 2 << 20

// newProbe returns the page-cache probe of a body: mincore where it
// tells this process the truth, no-wait reads of each span's ends
// elsewhere.
func newProbe(f Body) pagecache.Probe { return pagecache.NewProbe(f.FD(), f.MincoreTrusted()) }

// ResidentWhole reports whether the whole file is in the page cache: one
// mincore over it where mincore answers, else the ends of every span of
// 2 MiB, stopping at the first missing one. The handler's policy asks it,
// at most once a second per file, before it sends a large body to the
// ring's engine.
func ResidentWhole(f Body) bool {
	p := newProbe(f)
	return p.Whole(f.Size(), residencyProbe)
}

// Raw sendfile calls. A sendfile call of a large chunk lasts longer than
// the Go scheduler's 20 µs tick: the runtime then takes the P from the
// thread in the system call and, with no idle P (GOMAXPROCS=1, the usual
// case of a server pinned to one CPU), wakes another thread to run it,
// which finds nothing to do and sleeps again; the thread that returns
// from sendfile takes a P back and wakes the scheduler's monitor. That is
// 4 to 6 futex, nanosleep and sched_yield calls and three context
// switches per chunk that nginx does not pay (about a fifth of the
// server's CPU on a 1 GiB file). A sendfile call whose pages are all in
// the page cache, to a non-blocking socket, cannot wait: it can be made
// without telling the scheduler, as a raw system call, and the P stays.
// A page that is not resident would make that call wait for the disk
// with the P held (every goroutine of it stalled), so only calls within
// a run of the file seen resident just now are made raw.
const (
	// rawFresh is how long a sighting of pages in the page cache stands
	// for a raw call: the probe's own look-ahead time.
	rawFresh = 250 * time.Millisecond
	// rawProbeMin is the least of a body left for which the sendfile loop
	// asks the page cache itself when nothing it knows is fresh: a probe
	// per 64 MiB (mincore) or per chunk (a no-wait read) repays itself
	// over a large body, not over a small one, whose calls are short.
	rawProbeMin = 8 << 20
	// rawCallMin is the smallest call made raw: a shorter one (about
	// 150 µs on loopback) seldom outlasts the scheduler's tick, and the
	// yield after a raw call would cost more than it saves.
	rawCallMin = 512 << 10
)

// residency is what a sendfile turn knows of its body's pages.
type residency struct {
	// ok allows raw calls at all: a file on a filesystem without a block
	// device (FUSE, NFS) may wait for its server even for cached pages.
	ok bool
	// end is the end of the run from the next offset that was seen
	// resident at seen.
	end  int64
	seen time.Time
	// probe asks the page cache again when that is stale.
	probe pagecache.Probe
}

// newResidency is the residency of a body sent from start to end: the
// whole of it seen in the page cache just now when resident is set.
func newResidency(body Body, end int64, resident bool) residency {
	r := residency{ok: !body.NoBlockDevice(), probe: newProbe(body)}
	if resident {
		r.end, r.seen = end, time.Now()
	}
	return r
}

// rawCall reports whether the n bytes of src at its offset may be sent
// with a raw sendfile call at time now: they were seen in the page cache
// within rawFresh, or, with enough of the body left, the probe sees them
// there now.
func (src *fileSource) rawCall(n int64, now time.Time) bool {
	r := &src.Res
	if !r.ok || n < rawCallMin {
		return false
	}
	if src.Off+n <= r.end && now.Sub(r.seen) < rawFresh {
		return true
	}
	if src.N < rawProbeMin {
		return false
	}
	got, err := r.probe.Resident(src.Off, n)
	if err != nil || got < n {
		return false
	}
	r.end, r.seen = src.Off+got, now
	return true
}
