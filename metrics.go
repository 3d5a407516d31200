package flashserve

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashserve/caddy-flash-serve/prewarm"
	"github.com/flashserve/caddy-flash-serve/statacc"
	"github.com/flashserve/caddy-flash-serve/transmit"
)

// Stats are the module's numbers, process-wide: the admin API's
// /flash_serve/stats answers them as JSON, the status page shows them and
// the metrics collector exports them to Prometheus.
type Stats struct {
	// Engines holds the requests and body bytes of each engine, by name.
	Engines map[string]EngineStats `json:"engines"`
	// TransfersInFlight counts the bodies holding a max_transfers place.
	TransfersInFlight int64 `json:"transfers_in_flight"`
	// Rejected counts the 503s by cause: max_transfers full, the stat
	// queue full, the fd table full.
	Rejected map[string]int64 `json:"rejected"`
	// SendfileCalls and SendfileFallbacks count what the listener
	// wrapper's connections did.
	SendfileCalls     int64 `json:"sendfile_calls"`
	SendfileFallbacks int64 `json:"sendfile_fallbacks"`
	// SendfileRefused counts sendfile calls the kernel refused (EINVAL,
	// ENOSYS, EOPNOTSUPP: a file sendfile cannot read); those bodies were
	// copied from where sendfile stopped.
	SendfileRefused int64 `json:"sendfile_refused"`
	// Lookups are the lookups of every cache, live or retired, by how
	// they were answered.
	Lookups LookupStats `json:"lookups"`
	// Cache sums the live caches' figures (their counters with those of
	// retired caches, so that they never go backwards).
	Cache CacheFigures `json:"cache"`
	// CacheInstances are the live caches, one per distinct setting, each
	// with its bounds, in a fixed order: a site's cache is its index here.
	CacheInstances []CacheInstance `json:"cache_instances"`
	// Sites are the flash_serve handlers of the running config.
	Sites []SiteStats `json:"sites"`
	// ColdReads are the reads of data not in the page cache through
	// io_uring: the buffers they hold within their budget, the ring's
	// reads in flight.
	ColdReads ColdReadStats `json:"cold_reads"`
	// Statacc sums the counters of every cache, live or retired.
	//
	// Deprecated: the same numbers as Lookups and Cache, under the name of
	// an internal package; it goes in the release after next.
	Statacc CacheStats `json:"statacc"`
	// Caches is the number of live caches (one per distinct setting).
	Caches  int          `json:"caches"`
	Prewarm PrewarmStats `json:"prewarm"`
}

// EngineStats are one engine's counters.
type EngineStats struct {
	Requests int64 `json:"requests"`
	Bytes    int64 `json:"bytes"`
}

// LookupStats are the caches' lookups: how a request path (or an index,
// a sidecar) became a file or "no such file".
type LookupStats struct {
	// Hits were answered from the cache, NegativeHits answered "no such
	// file" from it, both without a system call; Misses went to the
	// filesystem; Merged waited for a miss of the same path in flight.
	Hits         int64 `json:"hits"`
	NegativeHits int64 `json:"negative_hits"`
	Misses       int64 `json:"misses"`
	Merged       int64 `json:"merged"`
	// HitRatio is the share of lookups answered from the cache, negative
	// hits included; null before the first lookup.
	HitRatio *float64 `json:"hit_ratio"`
	// QueueDepth is the misses waiting for a lookup worker now,
	// WaitSeconds the time misses spent waiting for one.
	QueueDepth  int64   `json:"queue_depth"`
	WaitSeconds float64 `json:"wait_seconds"`
}

// CacheFigures are what a cache holds against its bounds, and what it
// dropped.
type CacheFigures struct {
	// Entries counts every cached entry, negative ones included;
	// NegativeEntries the cached "no such file" answers, MaxNegative
	// their bound (negative_cache, 0 when off); Listings the directories
	// listed, whose missing names are answered with no entry.
	Entries         int64 `json:"entries"`
	NegativeEntries int64 `json:"negative_entries"`
	MaxNegative     int64 `json:"max_negative_entries"`
	Listings        int64 `json:"listings"`
	// OpenFiles counts the descriptors held, MaxOpenFiles their bound.
	OpenFiles    int64 `json:"open_files"`
	MaxOpenFiles int64 `json:"max_open_files"`
	// MemoryBytes is the file content kept in memory, MemoryBudget its
	// bound (memory_cache, 0 when off).
	MemoryBytes  int64 `json:"memory_bytes"`
	MemoryBudget int64 `json:"memory_budget"`
	// WatchedDirs counts the directories inotify watches for the cache,
	// MaxWatches their bound; InotifyWatches the watches they take;
	// UnwatchedDirs the directories whose watch failed.
	WatchedDirs    int64 `json:"watched_dirs"`
	MaxWatches     int64 `json:"max_watches"`
	InotifyWatches int64 `json:"inotify_watches"`
	UnwatchedDirs  int64 `json:"unwatched_dirs"`
	// Invalidations, Flushes, Evictions, NegativeEvictions, Expired,
	// IdleClosed and Shed count the entries dropped: their file changed,
	// an inotify overflow flushed the cache, a descriptor evicted for
	// max_open_files, a negative entry for negative_cache, stale, idle on a
	// filesystem mounted below the site's root (so that it can be
	// unmounted), closed because the fd table was full.
	Invalidations     int64 `json:"invalidations"`
	Flushes           int64 `json:"flushes"`
	Evictions         int64 `json:"evictions"`
	NegativeEvictions int64 `json:"negative_evictions"`
	Expired           int64 `json:"expired"`
	IdleClosed        int64 `json:"idle_closed"`
	Shed              int64 `json:"shed"`
}

// CacheInstance is one live cache.
type CacheInstance struct {
	// ID is its index in Stats.CacheInstances.
	ID int `json:"id"`
	CacheFigures
}

// SiteStats are one flash_serve handler's lookups. A site is a handler
// of the running config (a Caddyfile site block, or a route of one):
// sites that share one cache are told apart by their own counts, which
// start when the config is loaded.
type SiteStats struct {
	// ID numbers the handlers in the order they were provisioned, over
	// the process's life.
	ID int64 `json:"id"`
	// Root is the site root: the configured one, or, when it is a
	// placeholder (the `root` directive's), the first one a request
	// resolved it to ("" before), with OtherRoots set once another was
	// seen; RootSetting is then the placeholder.
	Root        string `json:"root"`
	RootSetting string `json:"root_setting,omitempty"`
	OtherRoots  bool   `json:"other_roots,omitempty"`
	// Cache is the index of its cache in Stats.CacheInstances.
	Cache int `json:"cache"`
	// Since is when the handler was provisioned.
	Since time.Time `json:"since"`
	// Hits, NegativeHits and Misses are its lookups (Misses: through the
	// filesystem or merged into one), HitRatio the share of hits.
	Hits         int64    `json:"hits"`
	NegativeHits int64    `json:"negative_hits"`
	Misses       int64    `json:"misses"`
	HitRatio     *float64 `json:"hit_ratio"`
}

// ColdReadStats describe the io_uring reads of data not in the page cache.
type ColdReadStats struct {
	// BufferBytes are the bytes of buffers ring reads hold now, within
	// BufferLimit (64 MiB): the cold budget in use.
	BufferBytes int64 `json:"buffer_bytes"`
	BufferLimit int64 `json:"buffer_limit"`
	// Ring says whether the process has an io_uring; RingReads are its
	// reads in flight, RingSlots how many it can hold.
	Ring      bool  `json:"ring"`
	RingReads int64 `json:"ring_reads"`
	RingSlots int64 `json:"ring_slots"`
}

// CacheStats are the statacc counters and gauges.
type CacheStats struct {
	Hits          int64   `json:"hits"`
	NegativeHits  int64   `json:"negative_hits"`
	Misses        int64   `json:"misses"`
	Merged        int64   `json:"merged"`
	QueueDepth    int64   `json:"queue_depth"`
	WaitSeconds   float64 `json:"wait_seconds"`
	Invalidations int64   `json:"invalidations"`
	Flushes       int64   `json:"flushes"`
	Evictions     int64   `json:"evictions"`
	// NegativeEvictions counts the negative entries dropped to make room
	// in a full negative cache for paths that missed again.
	NegativeEvictions int64 `json:"negative_evictions"`
	// Expired counts the entries the janitor dropped as stale: not asked
	// for within revalidate (twice it for a negative entry of a watched
	// directory).
	Expired int64 `json:"expired"`
	// IdleClosed counts the entries holding a descriptor on a filesystem
	// mounted below their site's root that the janitor dropped because no
	// request had used them for 2 to 4 s, so that it can be unmounted.
	IdleClosed    int64 `json:"idle_closed"`
	Shed          int64 `json:"shed"`
	QueueFull     int64 `json:"queue_full"`
	OpenFiles     int64 `json:"open_files"`
	Entries       int64 `json:"entries"`
	NegativeCount int64 `json:"negative_entries"`
	MemoryBytes   int64 `json:"memory_bytes"`
	UnwatchedDirs int64 `json:"unwatched_dirs"`
}

// PrewarmStats describe the page-cache warm-ups and the hot set.
type PrewarmStats struct {
	Bytes               int64 `json:"bytes"`
	Files               int64 `json:"files"`
	HotSetBytes         int64 `json:"hot_set_bytes"`
	HotSetResidentBytes int64 `json:"hot_set_resident_bytes"`
	// HotSetUnknownBytes is the part of the hot set whose residency the
	// server cannot know: files it neither owns nor may write.
	HotSetUnknownBytes int64 `json:"hot_set_unknown_bytes"`
	// Running counts the warm-ups in progress: the handlers' (prewarm,
	// keep_hot) and the admin API's, whose roots AdminRoots lists.
	Running    int64    `json:"running"`
	AdminRoots []string `json:"admin_roots"`
}

// retired keeps the counters of caches that were destroyed (a config
// reload with other settings), so that the totals never go backwards,
// as Prometheus counters must not.
var retired struct {
	sync.Mutex
	CacheStats
}

// addCounters adds a cache's counters, the numbers that only grow; the
// gauges are added for live caches only.
func (s *CacheStats) addCounters(c statacc.Counters) {
	s.Hits += c.Hits
	s.NegativeHits += c.NegativeHits
	s.Misses += c.Misses
	s.Merged += c.Merged
	s.WaitSeconds += c.Wait.Seconds()
	s.Invalidations += c.Invalidations
	s.Flushes += c.Flushes
	s.Evictions += c.Evictions
	s.NegativeEvictions += c.NegativeEvictions
	s.Expired += c.Expired
	s.IdleClosed += c.IdleClosed
	s.Shed += c.Shed
	s.QueueFull += c.QueueFull
}

// retire adds a cache's counters to the retired totals when it goes away.
func retire(c *statacc.Cache) {
	retired.Lock()
	retired.addCounters(c.Snapshot())
	retired.Unlock()
}

// snapshot reads every counter now.
func snapshot() Stats { return collect(true) }

// collect reads the counters; without countEntries the caches' entries
// are not counted (Stats.Cache.Entries and Statacc.Entries stay 0), which
// would walk every cache's map: what the sampler reads.
func collect(countEntries bool) Stats {
	warmed := prewarm.Snapshot()
	ts := transmit.Snapshot()
	s := Stats{
		Engines:           make(map[string]EngineStats, transmit.NumEngines),
		TransfersInFlight: counters.inFlight.Load(),
		SendfileCalls:     ts.SendfileCalls,
		SendfileFallbacks: ts.SendfileFallbacks,
		SendfileRefused:   ts.SendfileRefused,
		Prewarm: PrewarmStats{
			Bytes:               warmed.Bytes,
			Files:               warmed.Files,
			HotSetBytes:         lastHotSet.bytes.Load(),
			HotSetResidentBytes: lastHotSet.resident.Load(),
			HotSetUnknownBytes:  lastHotSet.unknown.Load(),
		},
	}
	for e := range transmit.NumEngines {
		s.Engines[e.String()] = EngineStats{Requests: counters.requests[e].Load(), Bytes: counters.bytes[e].Load()}
	}
	retired.Lock()
	s.Statacc = retired.CacheStats
	retired.Unlock()
	// The live caches in the order of their keys, so that a cache keeps
	// its index while the config does.
	type liveCache struct {
		key string
		c   *statacc.Cache
	}
	var live []liveCache
	caches.Range(func(k, v any) bool {
		live = append(live, liveCache{k.(string), v.(*sharedCache).Cache})
		return true
	})
	slices.SortFunc(live, func(a, b liveCache) int { return strings.Compare(a.key, b.key) })
	cacheIndex := make(map[string]int, len(live))
	s.CacheInstances = make([]CacheInstance, 0, len(live))
	for i, lc := range live {
		var c statacc.Counters
		if countEntries {
			c = lc.c.Snapshot()
		} else {
			c = lc.c.Counts()
		}
		cacheIndex[lc.key] = i
		s.Caches++
		s.Statacc.addCounters(c)
		s.Statacc.QueueDepth += c.QueueDepth
		s.Statacc.OpenFiles += c.OpenFiles
		s.Statacc.Entries += c.Entries
		s.Statacc.NegativeCount += c.NegativeEntries
		s.Statacc.MemoryBytes += c.MemoryBytes
		s.Statacc.UnwatchedDirs += c.UnwatchedDirs
		inst := CacheInstance{ID: i, CacheFigures: cacheFigures(c, lc.c.Options())}
		s.CacheInstances = append(s.CacheInstances, inst)
		f := &s.Cache
		f.NegativeEntries += inst.NegativeEntries
		f.MaxNegative += inst.MaxNegative
		f.Listings += inst.Listings
		f.MaxOpenFiles += inst.MaxOpenFiles
		f.MemoryBudget += inst.MemoryBudget
		f.WatchedDirs += inst.WatchedDirs
		f.MaxWatches += inst.MaxWatches
		f.InotifyWatches += inst.InotifyWatches
	}
	st := &s.Statacc
	s.Lookups = LookupStats{Hits: st.Hits, NegativeHits: st.NegativeHits, Misses: st.Misses, Merged: st.Merged,
		HitRatio: hitRatio(st.Hits+st.NegativeHits, st.Misses+st.Merged), QueueDepth: st.QueueDepth, WaitSeconds: st.WaitSeconds}
	f := &s.Cache
	f.Entries, f.OpenFiles, f.MemoryBytes, f.UnwatchedDirs = st.Entries, st.OpenFiles, st.MemoryBytes, st.UnwatchedDirs
	f.Invalidations, f.Flushes, f.Evictions, f.NegativeEvictions, f.Expired, f.IdleClosed, f.Shed =
		st.Invalidations, st.Flushes, st.Evictions, st.NegativeEvictions, st.Expired, st.IdleClosed, st.Shed
	s.Rejected = map[string]int64{
		"max_transfers": counters.limited.Load(),
		"stat_queue":    s.Statacc.QueueFull,
		"fd_exhaustion": counters.fdExhausted.Load(),
	}
	s.Sites = siteStats(cacheIndex)
	s.ColdReads.BufferBytes, s.ColdReads.BufferLimit = transmit.ColdBuffers()
	if ring := transmit.SharedRing(); ring != nil {
		reads, slots := ring.Reads()
		s.ColdReads.Ring, s.ColdReads.RingReads, s.ColdReads.RingSlots = true, int64(reads), int64(slots)
	}
	s.Prewarm.AdminRoots = adminPrewarmRoots()
	s.Prewarm.Running = handlerWarmups.Load() + int64(len(s.Prewarm.AdminRoots))
	return s
}

// cacheFigures are the figures of one cache, c read from it, o its
// options (with their defaults filled in).
func cacheFigures(c statacc.Counters, o statacc.Options) CacheFigures {
	if o.NoInotify {
		o.MaxWatches = 0 // it watches nothing
	}
	return CacheFigures{
		Entries:           c.Entries,
		NegativeEntries:   c.NegativeEntries,
		MaxNegative:       int64(max(o.NegativeEntries, 0)),
		Listings:          c.Listings,
		OpenFiles:         c.OpenFiles,
		MaxOpenFiles:      int64(o.MaxOpenFiles),
		MemoryBytes:       c.MemoryBytes,
		MemoryBudget:      max(o.MemoryBudget, 0),
		WatchedDirs:       c.WatchedDirs,
		MaxWatches:        int64(o.MaxWatches),
		InotifyWatches:    c.Watches,
		UnwatchedDirs:     c.UnwatchedDirs,
		Invalidations:     c.Invalidations,
		Flushes:           c.Flushes,
		Evictions:         c.Evictions,
		NegativeEvictions: c.NegativeEvictions,
		Expired:           c.Expired,
		IdleClosed:        c.IdleClosed,
		Shed:              c.Shed,
	}
}

// hitRatio is hits over all lookups, nil when there were none.
func hitRatio(hits, others int64) *float64 {
	if hits+others <= 0 {
		return nil
	}
	r := float64(hits) / float64(hits+others)
	return &r
}

// metricsCollector exports Stats to Prometheus, read when scraped, so
// that the request path only bumps its atomic counters.
type metricsCollector struct{}

const metricsNamespace = "caddy_flash_serve_"

func newDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(metricsNamespace+name, help, labels, nil)
}

var (
	descRequests  = newDesc("requests_total", "Responses with a body, by the engine that sent it.", "engine")
	descBytesSent = newDesc("bytes_sent_total", "Body bytes sent, by the engine that sent them.", "engine")
	descInFlight  = newDesc("transfers_in_flight", "Bodies holding a max_transfers place.")
	descRejected  = newDesc("rejected_total", "503 answers, by cause: max_transfers, stat_queue, fd_exhaustion.", "cause")
	descSendfile  = newDesc("sendfile_calls_total", "sendfile(2) calls made by the listener wrapper.")
	descFallbacks = newDesc("sendfile_fallbacks_total", "Bodies the listener wrapper had to copy instead.")
	descRefused   = newDesc("sendfile_refused_total", "sendfile(2) calls the kernel refused (EINVAL, ENOSYS, EOPNOTSUPP); the rest of each body was copied.")

	descLookups           = newDesc("lookups_total", "Lookups of request paths (and index files, sidecars), by result: hit and negative_hit (\"no such file\") answered from the cache with no system call, miss through the filesystem, merged into a miss of the same path in flight.", "result")
	descLookupQueue       = newDesc("lookup_queue_depth", "Misses waiting for a lookup worker.")
	descLookupWait        = newDesc("lookup_wait_seconds_total", "Time misses spent waiting for a lookup worker.")
	descCacheInvalidated  = newDesc("cache_invalidations_total", "Cached entries dropped because their file or directory changed.")
	descCacheFlushes      = newDesc("cache_flushes_total", "Whole-cache flushes (inotify queue overflows).")
	descCacheEvictions    = newDesc("cache_evictions_total", "Cached entries evicted to stay within a bound: open_file for max_open_files, negative for negative_cache.", "entry")
	descCacheExpirations  = newDesc("cache_expirations_total", "Cached entries dropped as stale: not asked for within revalidate (twice it for a negative entry of a watched directory).")
	descCacheIdleClosed   = newDesc("cache_idle_closed_total", "Descriptors on a filesystem mounted below the site's root closed because no request used them for 2 to 4 s (so that it can be unmounted).")
	descCacheOpenFiles    = newDesc("cache_open_files", "Descriptors the caches hold open.")
	descCacheOpenLimit    = newDesc("cache_open_files_limit", "The most descriptors the caches keep open (max_open_files, summed over the caches).")
	descCacheEntries      = newDesc("cache_entries", "Entries cached, negative ones included.")
	descCacheNegatives    = newDesc("cache_negative_entries", "Cached \"no such file\" answers.")
	descCacheListings     = newDesc("cache_listings", "Directories listed, whose missing names are answered with no entry.")
	descCacheMemory       = newDesc("cache_memory_bytes", "Bytes of small files kept in memory.")
	descCacheMemoryLimit  = newDesc("cache_memory_limit_bytes", "The most bytes of small files kept in memory (memory_cache, summed over the caches).")
	descCacheWatched      = newDesc("cache_watched_directories", "Directories inotify watches for the caches.")
	descCacheWatchedLimit = newDesc("cache_watched_directories_limit", "The most directories watched (max_watches, summed over the caches).")
	descColdBuffers       = newDesc("cold_read_buffer_bytes", "Bytes of buffers held by io_uring reads of data not in the page cache, within the cold budget.")
	descColdBufferLimit   = newDesc("cold_read_buffer_limit_bytes", "The cold budget: the most bytes of buffers io_uring reads hold at once.")
	descRingReads         = newDesc("io_uring_reads_in_flight", "io_uring operations in flight.")

	descPrewarmBytes = newDesc("prewarm_bytes_total", "Bytes read into the page cache by prewarm.")
	descPrewarmFiles = newDesc("prewarm_files_total", "Files read into the page cache by prewarm.")
	descHotSet       = newDesc("hot_set_bytes", "Size of the last saved hot set.")
	descHotResident  = newDesc("hot_set_resident_bytes", "Bytes of the last saved hot set in the page cache when it was saved.")
	descHotUnknown   = newDesc("hot_set_unknown_bytes", "Bytes of the last saved hot set whose residency the server cannot know (files it neither owns nor may write).")
)

// bytes_total and statacc_* are the names of 0.1.0 for what
// bytes_sent_total, lookups_* and cache_* say now, exported with the same
// values for one more release.
//
// Deprecated: they go in the release after next.
var (
	descBytes         = newDesc("bytes_total", "Deprecated: bytes_sent_total.", "engine")
	descHits          = newDesc("statacc_hits_total", "Deprecated: lookups_total{result=\"hit\"}.")
	descNegativeHits  = newDesc("statacc_negative_hits_total", "Deprecated: lookups_total{result=\"negative_hit\"}.")
	descMisses        = newDesc("statacc_misses_total", "Deprecated: lookups_total{result=\"miss\"}.")
	descMerged        = newDesc("statacc_merged_total", "Deprecated: lookups_total{result=\"merged\"}.")
	descQueueDepth    = newDesc("statacc_queue_depth", "Deprecated: lookup_queue_depth.")
	descWait          = newDesc("statacc_wait_seconds_total", "Deprecated: lookup_wait_seconds_total.")
	descInvalidations = newDesc("statacc_invalidations_total", "Deprecated: cache_invalidations_total.")
	descFlushes       = newDesc("statacc_flushes_total", "Deprecated: cache_flushes_total.")
	descEvictions     = newDesc("statacc_evictions_total", "Deprecated: cache_evictions_total{entry=\"open_file\"}.")
	descNegEvictions  = newDesc("statacc_negative_evictions_total", "Deprecated: cache_evictions_total{entry=\"negative\"}.")
	descExpired       = newDesc("statacc_expired_total", "Deprecated: cache_expirations_total.")
	descOpenFiles     = newDesc("statacc_open_files", "Deprecated: cache_open_files.")
	descEntries       = newDesc("statacc_entries", "Deprecated: cache_entries.")
	descMemoryBytes   = newDesc("statacc_memory_bytes", "Deprecated: cache_memory_bytes.")
)

// deprecatedMetrics maps each deprecated name to the series that replaces
// it: its name and labels, as the docs and the tests spell them.
var deprecatedMetrics = map[*prometheus.Desc]string{
	descBytes:         `bytes_sent_total`,
	descHits:          `lookups_total{result="hit"}`,
	descNegativeHits:  `lookups_total{result="negative_hit"}`,
	descMisses:        `lookups_total{result="miss"}`,
	descMerged:        `lookups_total{result="merged"}`,
	descQueueDepth:    `lookup_queue_depth`,
	descWait:          `lookup_wait_seconds_total`,
	descInvalidations: `cache_invalidations_total`,
	descFlushes:       `cache_flushes_total`,
	descEvictions:     `cache_evictions_total{entry="open_file"}`,
	descNegEvictions:  `cache_evictions_total{entry="negative"}`,
	descExpired:       `cache_expirations_total`,
	descOpenFiles:     `cache_open_files`,
	descEntries:       `cache_entries`,
	descMemoryBytes:   `cache_memory_bytes`,
}

var allDescs = []*prometheus.Desc{descRequests, descBytesSent, descInFlight, descRejected, descSendfile, descFallbacks, descRefused,
	descLookups, descLookupQueue, descLookupWait, descCacheInvalidated, descCacheFlushes, descCacheEvictions, descCacheExpirations, descCacheIdleClosed,
	descCacheOpenFiles, descCacheOpenLimit, descCacheEntries, descCacheNegatives, descCacheListings, descCacheMemory,
	descCacheMemoryLimit, descCacheWatched, descCacheWatchedLimit, descColdBuffers, descColdBufferLimit, descRingReads,
	descPrewarmBytes, descPrewarmFiles, descHotSet, descHotResident, descHotUnknown,
	descBytes, descHits, descNegativeHits, descMisses, descMerged, descQueueDepth, descWait, descInvalidations, descFlushes,
	descEvictions, descNegEvictions, descExpired, descOpenFiles, descEntries, descMemoryBytes}

// Describe implements prometheus.Collector.
func (metricsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A deprecated name and its
// replacement are read from one snapshot, so a scrape has them equal.
func (metricsCollector) Collect(ch chan<- prometheus.Metric) {
	s := snapshot()
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	for e := range transmit.NumEngines {
		name := e.String()
		counter(descRequests, float64(s.Engines[name].Requests), name)
		counter(descBytesSent, float64(s.Engines[name].Bytes), name)
		counter(descBytes, float64(s.Engines[name].Bytes), name)
	}
	gauge(descInFlight, float64(s.TransfersInFlight))
	for _, cause := range []string{"max_transfers", "stat_queue", "fd_exhaustion"} {
		counter(descRejected, float64(s.Rejected[cause]), cause)
	}
	counter(descSendfile, float64(s.SendfileCalls))
	counter(descFallbacks, float64(s.SendfileFallbacks))
	counter(descRefused, float64(s.SendfileRefused))

	l, c := s.Lookups, s.Cache
	for _, m := range []struct {
		result string
		v      int64
		old    *prometheus.Desc
	}{{"hit", l.Hits, descHits}, {"negative_hit", l.NegativeHits, descNegativeHits}, {"miss", l.Misses, descMisses}, {"merged", l.Merged, descMerged}} {
		counter(descLookups, float64(m.v), m.result)
		counter(m.old, float64(m.v))
	}
	gauge(descLookupQueue, float64(l.QueueDepth))
	gauge(descQueueDepth, float64(l.QueueDepth))
	counter(descLookupWait, l.WaitSeconds)
	counter(descWait, l.WaitSeconds)
	counter(descCacheInvalidated, float64(c.Invalidations))
	counter(descInvalidations, float64(c.Invalidations))
	counter(descCacheFlushes, float64(c.Flushes))
	counter(descFlushes, float64(c.Flushes))
	counter(descCacheEvictions, float64(c.Evictions), "open_file")
	counter(descEvictions, float64(c.Evictions))
	counter(descCacheEvictions, float64(c.NegativeEvictions), "negative")
	counter(descNegEvictions, float64(c.NegativeEvictions))
	counter(descCacheExpirations, float64(c.Expired))
	counter(descExpired, float64(c.Expired))
	counter(descCacheIdleClosed, float64(c.IdleClosed))
	gauge(descCacheOpenFiles, float64(c.OpenFiles))
	gauge(descOpenFiles, float64(c.OpenFiles))
	gauge(descCacheEntries, float64(c.Entries))
	gauge(descEntries, float64(c.Entries))
	gauge(descCacheMemory, float64(c.MemoryBytes))
	gauge(descMemoryBytes, float64(c.MemoryBytes))
	gauge(descCacheOpenLimit, float64(c.MaxOpenFiles))
	gauge(descCacheNegatives, float64(c.NegativeEntries))
	gauge(descCacheListings, float64(c.Listings))
	gauge(descCacheMemoryLimit, float64(c.MemoryBudget))
	gauge(descCacheWatched, float64(c.WatchedDirs))
	gauge(descCacheWatchedLimit, float64(c.MaxWatches))
	gauge(descColdBuffers, float64(s.ColdReads.BufferBytes))
	gauge(descColdBufferLimit, float64(s.ColdReads.BufferLimit))
	gauge(descRingReads, float64(s.ColdReads.RingReads))

	counter(descPrewarmBytes, float64(s.Prewarm.Bytes))
	counter(descPrewarmFiles, float64(s.Prewarm.Files))
	gauge(descHotSet, float64(s.Prewarm.HotSetBytes))
	gauge(descHotResident, float64(s.Prewarm.HotSetResidentBytes))
	gauge(descHotUnknown, float64(s.Prewarm.HotSetUnknownBytes))
}

// registerMetrics adds the collector to the config's metrics registry,
// which serves the admin /metrics endpoint. Every handler and the admin
// module of a config call it; the first one registers.
func registerMetrics(ctx caddy.Context) error {
	reg := ctx.GetMetricsRegistry()
	if reg == nil {
		return nil
	}
	err := reg.Register(metricsCollector{})
	var are prometheus.AlreadyRegisteredError
	if err != nil && !errors.As(err, &are) {
		return err
	}
	return nil
}

var _ prometheus.Collector = metricsCollector{}
