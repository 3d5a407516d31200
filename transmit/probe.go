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

// ResidentWhole reports whether the whole file is in the page cache: one
// mincore over it where mincore answers, else the ends of every span of
// 2 MiB, stopping at the first missing one. The handler's policy asks it,
// at most once a second per file, before it sends a large body to the
// ring's engine.
func ResidentWhole(f Body) bool {
	p := newProbe(f)
	return p.Whole(f.Size(), residencyProbe)
}
