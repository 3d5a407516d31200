package flashserve

import (
	"sync"
	"time"

	"github.com/flashserve/caddy-flash-serve/transmit"
)

// The status page's sparklines cover the last ten minutes, a sample every
// five seconds: a ring of 120 samples of a few hundred bytes each.
//
// sampleEvery is a variable for the tests, which set it before a config
// is loaded.
var sampleEvery = 5 * time.Second

const (
	sampleCount = 120
	// maxSampledSites bounds the sites a sample keeps the lookups of (the
	// first ones provisioned): a config of thousands of sites costs the
	// ring no more than one of a hundred.
	maxSampledSites = 100
)

// sample is what the sampler read at one moment: the counters that
// already exist, read as the admin API reads them (collect), never
// counted again on the request path.
type sample struct {
	at time.Time
	// hits counts the lookups answered from the cache (negative hits
	// included), lookups all of them; both only grow.
	hits, lookups int64
	// bytes are the body bytes sent so far, by engine.
	bytes [transmit.NumEngines]int64
	// Gauges: descriptors held, cached "no such file" answers, cold
	// budget in use, bodies in flight.
	openFiles, negativeEntries, coldBytes, inFlight int64
	// sites are the lookups of the first maxSampledSites sites.
	sites []siteSample
}

// siteSample is one site's lookups so far.
type siteSample struct{ id, lookups int64 }

// sampler keeps the last sampleCount samples. It runs while any
// flash_serve handler is provisioned (registerSite starts it, the
// unregisterSite of the last one stops it), so that a reload, which
// provisions the new handlers before it cleans up the old ones, keeps
// its history, and a process with no handler left runs no goroutine.
type sampler struct {
	mu   sync.Mutex
	ring [sampleCount]sample
	// next is where the next sample goes, n how many the ring holds.
	next, n int

	every time.Duration
	stop  chan struct{}
	done  chan struct{}
}

// startSampler takes a first sample now and one every sampleEvery until
// stopped.
func startSampler() *sampler {
	s := &sampler{every: sampleEvery, stop: make(chan struct{}), done: make(chan struct{})}
	s.take()
	go s.run()
	return s
}

func (s *sampler) run() {
	defer close(s.done)
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.take()
		}
	}
}

// halt stops the sampler and waits for its goroutine to end.
func (s *sampler) halt() {
	close(s.stop)
	<-s.done
}

// take reads the counters and adds a sample to the ring.
func (s *sampler) take() {
	st := collect(false)
	smp := sample{
		at:              time.Now(),
		hits:            st.Lookups.Hits + st.Lookups.NegativeHits,
		lookups:         st.Lookups.Hits + st.Lookups.NegativeHits + st.Lookups.Misses + st.Lookups.Merged,
		openFiles:       st.Cache.OpenFiles,
		negativeEntries: st.Cache.NegativeEntries,
		coldBytes:       st.ColdReads.BufferBytes,
		inFlight:        st.TransfersInFlight,
	}
	for e := range transmit.NumEngines {
		smp.bytes[e] = st.Engines[e.String()].Bytes
	}
	sites := st.Sites[:min(len(st.Sites), maxSampledSites)]
	smp.sites = make([]siteSample, len(sites))
	for i, site := range sites {
		smp.sites[i] = siteSample{id: site.ID, lookups: site.Hits + site.NegativeHits + site.Misses}
	}
	s.mu.Lock()
	s.ring[s.next] = smp
	s.next = (s.next + 1) % sampleCount
	s.n = min(s.n+1, sampleCount)
	s.mu.Unlock()
}

// samples returns the samples in the ring, oldest first.
func (s *sampler) samples() []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]sample, 0, s.n)
	for i := range s.n {
		out = append(out, s.ring[(s.next-s.n+i+sampleCount)%sampleCount])
	}
	return out
}

// currentSampler returns the running sampler, nil when no handler is
// provisioned.
func currentSampler() *sampler {
	sites.Lock()
	defer sites.Unlock()
	return sites.sampler
}
