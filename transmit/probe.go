package transmit

import "github.com/flashserve/caddy-flash-serve/internal/pagecache"

// residencyProbe is the span probed at a time: what is resident in it
// goes out with sendfile (or pread), what is not is read through the ring.
const residencyProbe = 2 << 20

// newProbe returns the page-cache probe of a body: mincore where it tells
// this process the truth, no-wait reads of each span's ends elsewhere.
func newProbe(f Body) pagecache.Probe {
	return pagecache.NewProbe(f.FD(), f.MincoreTrusted(), f.Size())
}

// firstMissing returns where the file stops being in the page cache, from
// its start: its size when it is all there; ok is false when nothing could
// be learnt.
func firstMissing(f Body) (off int64, ok bool) {
	p := newProbe(f)
	return p.FirstMissing(f.Size(), residencyProbe)
}
