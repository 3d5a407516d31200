package flashserve

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flashserve/caddy-flash-serve/statacc"
)

// site is one flash_serve handler as the status page shows it: its own
// count of its lookups, so that sites sharing one cache are told apart.
type site struct {
	// lookups are added to by GetCounted, on the hit path: they sit on
	// cache lines of their own (statacc.LookupCounts).
	lookups statacc.LookupCounts
	id      int64
	// rootSetting is the configured root when it has a placeholder (the
	// `root` directive's variable), else "".
	rootSetting string
	// root is the configured root, or the first a request resolved the
	// placeholder to; otherRoots is set once a request resolved another.
	// Both are written once, so that the hit path only reads them.
	root       atomic.Pointer[string]
	otherRoots atomic.Bool
	cacheKey   string
	since      time.Time
}

// sawRoot records the root a request resolved a placeholder root to: a
// load and a comparison, and a store the first time and the first time
// another root is seen.
func (s *site) sawRoot(root string) {
	p := s.root.Load()
	if p == nil {
		first := root
		if s.root.CompareAndSwap(nil, &first) {
			return
		}
		p = s.root.Load()
	}
	if *p != root && !s.otherRoots.Load() {
		s.otherRoots.Store(true)
	}
}

// sites are the handlers provisioned and not yet cleaned up, and the
// sampler that runs while there is one.
var sites struct {
	sync.Mutex
	list    []*site
	lastID  int64
	sampler *sampler
}

// samplerTransitions serializes the starts and stops of the sampler, done
// outside sites' lock: a sample reads the sites under it.
var samplerTransitions sync.Mutex

// registerSite adds a provisioned handler to the status page. root is its
// canonical root if static, else "", and rootSetting what it was given.
func registerSite(root, rootSetting, cacheKey string) *site {
	s := &site{cacheKey: cacheKey, since: time.Now()}
	if root != "" {
		s.root.Store(&root)
	} else {
		s.rootSetting = rootSetting
	}
	samplerTransitions.Lock()
	defer samplerTransitions.Unlock()
	sites.Lock()
	sites.lastID++
	s.id = sites.lastID
	sites.list = append(sites.list, s)
	start := sites.sampler == nil
	sites.Unlock()
	if start {
		smp := startSampler()
		sites.Lock()
		sites.sampler = smp
		sites.Unlock()
	}
	return s
}

// unregisterSite removes a handler that is cleaned up, and stops the
// sampler with the last one.
func unregisterSite(s *site) {
	samplerTransitions.Lock()
	defer samplerTransitions.Unlock()
	sites.Lock()
	sites.list = slices.DeleteFunc(sites.list, func(x *site) bool { return x == s })
	var stop *sampler
	if len(sites.list) == 0 {
		stop, sites.sampler = sites.sampler, nil
	}
	sites.Unlock()
	if stop != nil {
		stop.halt()
	}
}

// siteStats reads the sites' counts, in the order they were provisioned;
// cacheIndex gives a cache key's index among the live caches.
func siteStats(cacheIndex map[string]int) []SiteStats {
	sites.Lock()
	list := slices.Clone(sites.list)
	sites.Unlock()
	out := make([]SiteStats, 0, len(list))
	for _, s := range list {
		st := SiteStats{
			ID:           s.id,
			RootSetting:  s.rootSetting,
			OtherRoots:   s.otherRoots.Load(),
			Cache:        -1,
			Since:        s.since,
			Hits:         s.lookups.Hits.Load(),
			NegativeHits: s.lookups.NegativeHits.Load(),
			Misses:       s.lookups.Misses.Load(),
		}
		if p := s.root.Load(); p != nil {
			st.Root = *p
		}
		if i, ok := cacheIndex[s.cacheKey]; ok {
			st.Cache = i
		}
		st.HitRatio = hitRatio(st.Hits+st.NegativeHits, st.Misses)
		out = append(out, st)
	}
	return out
}

// adminPrewarmRoots are the roots of the admin API's warm-ups running now,
// sorted.
func adminPrewarmRoots() []string {
	adminRuns.Lock()
	defer adminRuns.Unlock()
	return runningRootsLocked()
}

// runningRootsLocked is adminPrewarmRoots with adminRuns held.
func runningRootsLocked() []string {
	roots := make([]string, 0, len(adminRuns.byRoot))
	for root := range adminRuns.byRoot {
		roots = append(roots, root)
	}
	slices.Sort(roots)
	return roots
}

// handlerWarmups counts the handlers' warm-ups in progress (prewarm,
// then keep_hot).
var handlerWarmups atomic.Int64
