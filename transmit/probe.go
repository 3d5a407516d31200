package transmit

import "github.com/flashserve/caddy-flash-serve/internal/pagecache"

// residencyProbe is the span probed at a time (pagecache.Probe): what is
// resident in it goes out with sendfile (or pread), what is not is read
// through the ring.
const residencyProbe = 2 << 20

// newProbe returns the page-cache probe of a body: mincore where it
// tells this process the truth, no-wait reads of each span's ends
// elsewhere.
func newProbe(f Body) pagecache.Probe {
	return pagecache.NewProbe(f.FD(), f.MincoreTrusted(), f.Size())
}

// FirstMissing returns where the file stops being in the page cache,
// from its start (pagecache.Probe.FirstMissing): its size when it is all
// there; ok is false when nothing could be learnt. One mincore over it
// where mincore answers, else the ends of every span of 2 MiB, stopping
// at the first missing one. The handler's policy asks it, at most once a
// second per file, before it sends a large body to the ring's engine, and
// passes the answer on in Transfer.MissingAt.
func FirstMissing(f Body) (off int64, ok bool) {
	p := newProbe(f)
	return p.FirstMissing(f.Size(), residencyProbe)
}
