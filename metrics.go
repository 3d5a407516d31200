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
	// OpenFiles counts the descriptors held, MaxOpenFiles their bound;
	// MaxEntries bounds the entries of regular files, with or without a
	// descriptor; Reopens counts the hits whose descriptor had been closed
	// for max_open_files, answered by opening the file again.
	OpenFiles    int64 `json:"open_files"`
	MaxOpenFiles int64 `json:"max_open_files"`
	MaxEntries   int64 `json:"max_entries"`
	Reopens      int64 `json:"reopens"`
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
	CacheDrops
}

// CacheDrops count the entries dropped: their file changed, an inotify
// overflow flushed the cache, a descriptor closed for max_open_files (its
// entry stays), an entry for max_entries, a negative entry for
// negative_cache, stale, idle on a filesystem mounted
// below the site's root (so that it can be unmounted), closed because the
// fd table was full.
type CacheDrops struct {
	Invalidations     int64 `json:"invalidations"`
	Flushes           int64 `json:"flushes"`
	Evictions         int64 `json:"evictions"`
	EntryEvictions    int64 `json:"entry_evictions"`
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

// CacheStats are the deprecated "statacc" object: the figures of
// LookupStats and CacheFigures under their 0.1.0 names.
type CacheStats struct {
	Hits         int64   `json:"hits"`
	NegativeHits int64   `json:"negative_hits"`
	Misses       int64   `json:"misses"`
	Merged       int64   `json:"merged"`
	QueueDepth   int64   `json:"queue_depth"`
	WaitSeconds  float64 `json:"wait_seconds"`
	CacheDrops
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
// reload with other settings), so that the totals never go backwards, as
// Prometheus counters must not.
var retired struct {
	sync.Mutex
	statacc.Counters
}

// retire adds a cache's counters, not its gauges, to the retired totals
// when it goes away.
func retire(c *statacc.Cache) {
	n := c.Counts()
	retired.Lock()
	for st, v := range n {
		if statacc.Stat(st).Counter() {
			retired.Counters[st] += v
		}
	}
	retired.Unlock()
}

// snapshot reads every counter now.
func snapshot() Stats { return collect(true) }

// collect reads the counters; without countEntries the caches' entries
// are not counted (left 0), which would walk every cache's map: what the
// sampler reads.
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
	total := retired.Counters
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
	var limits CacheFigures
	for i, lc := range live {
		var c statacc.Counters
		if countEntries {
			c = lc.c.Snapshot()
		} else {
			c = lc.c.Counts()
		}
		for st, v := range c {
			total[st] += v
		}
		cacheIndex[lc.key] = i
		inst := CacheInstance{ID: i, CacheFigures: cacheFigures(c)}
		inst.setLimits(lc.c.Options())
		s.CacheInstances = append(s.CacheInstances, inst)
		limits.MaxNegative += inst.MaxNegative
		limits.MaxOpenFiles += inst.MaxOpenFiles
		limits.MaxEntries += inst.MaxEntries
		limits.MemoryBudget += inst.MemoryBudget
		limits.MaxWatches += inst.MaxWatches
	}
	s.Caches = len(live)
	s.Cache = cacheFigures(total)
	s.Cache.MaxNegative, s.Cache.MaxOpenFiles, s.Cache.MaxEntries, s.Cache.MemoryBudget, s.Cache.MaxWatches =
		limits.MaxNegative, limits.MaxOpenFiles, limits.MaxEntries, limits.MemoryBudget, limits.MaxWatches
	wait := time.Duration(total[statacc.Wait]).Seconds()
	s.Lookups = LookupStats{Hits: total[statacc.Hits], NegativeHits: total[statacc.NegativeHits], Misses: total[statacc.Misses], Merged: total[statacc.Merged],
		HitRatio:   hitRatio(total[statacc.Hits]+total[statacc.NegativeHits], total[statacc.Misses]+total[statacc.Merged]),
		QueueDepth: total[statacc.QueueDepth], WaitSeconds: wait}
	f := s.Cache
	s.Statacc = CacheStats{Hits: s.Lookups.Hits, NegativeHits: s.Lookups.NegativeHits, Misses: s.Lookups.Misses, Merged: s.Lookups.Merged,
		QueueDepth: s.Lookups.QueueDepth, WaitSeconds: wait, CacheDrops: f.CacheDrops, QueueFull: total[statacc.QueueFull],
		OpenFiles: f.OpenFiles, Entries: f.Entries, NegativeCount: f.NegativeEntries, MemoryBytes: f.MemoryBytes, UnwatchedDirs: f.UnwatchedDirs}
	s.Rejected = map[string]int64{
		"max_transfers": counters.limited.Load(),
		"stat_queue":    total[statacc.QueueFull],
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

// cacheFigures are the figures of c, without the bounds.
func cacheFigures(c statacc.Counters) CacheFigures {
	return CacheFigures{
		Entries: c[statacc.Entries], NegativeEntries: c[statacc.NegativeEntries], Listings: c[statacc.Listings],
		OpenFiles: c[statacc.OpenFiles], Reopens: c[statacc.Reopens], MemoryBytes: c[statacc.MemoryBytes],
		WatchedDirs: c[statacc.WatchedDirs], InotifyWatches: c[statacc.Watches], UnwatchedDirs: c[statacc.UnwatchedDirs],
		CacheDrops: CacheDrops{Invalidations: c[statacc.Invalidations], Flushes: c[statacc.Flushes], Evictions: c[statacc.Evictions], EntryEvictions: c[statacc.EntryEvictions],
			NegativeEvictions: c[statacc.NegativeEvictions], Expired: c[statacc.Expired], IdleClosed: c[statacc.IdleClosed], Shed: c[statacc.Shed]},
	}
}

// setLimits sets the bounds of a cache with options o (defaults filled in).
func (f *CacheFigures) setLimits(o statacc.Options) {
	f.MaxNegative = int64(max(o.NegativeEntries, 0))
	f.MaxOpenFiles = int64(o.MaxOpenFiles)
	f.MaxEntries = int64(o.MaxEntries)
	f.MemoryBudget = max(o.MemoryBudget, 0)
	if !o.NoInotify { // else it watches nothing
		f.MaxWatches = int64(o.MaxWatches)
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

// series is one series of a metric: its label's value ("" without a label)
// and its value.
type series struct {
	label string
	v     float64
}

// metric is one exported metric, below metricsNamespace. A deprecated name
// has replacedBy, the series that replaces it (as docs/metrics.md spells
// it), and repeats its values, read from the same snapshot.
type metric struct {
	name, help string
	kind       prometheus.ValueType
	label      string // the label's name, for a metric of several series
	read       func(*Stats) []series
	replacedBy string
	desc       *prometheus.Desc
}

const (
	counter = prometheus.CounterValue
	gauge   = prometheus.GaugeValue
)

// single is a metric of one series, f's value.
func single(kind prometheus.ValueType, name, help string, f func(*Stats) int64) *metric {
	return &metric{name: name, help: help, kind: kind, read: func(s *Stats) []series { return []series{{v: float64(f(s))}} }}
}

func byEngine(f func(EngineStats) int64) func(*Stats) []series {
	return func(s *Stats) []series {
		var out []series
		for e := range transmit.NumEngines {
			out = append(out, series{e.String(), float64(f(s.Engines[e.String()]))})
		}
		return out
	}
}

// metrics are every exported metric: Describe and Collect read this table,
// TestMetricNamesWithDeprecatedAliases checks it against docs/metrics.md.
var metrics = []*metric{
	{name: "requests_total", help: "Responses with a body, by the engine that sent it.", kind: counter, label: "engine",
		read: byEngine(func(e EngineStats) int64 { return e.Requests })},
	{name: "bytes_sent_total", help: "Body bytes sent, by the engine that sent them.", kind: counter, label: "engine",
		read: byEngine(func(e EngineStats) int64 { return e.Bytes })},
	single(gauge, "transfers_in_flight", "Bodies holding a max_transfers place.", func(s *Stats) int64 { return s.TransfersInFlight }),
	{name: "rejected_total", help: "503 answers, by cause: max_transfers, stat_queue, fd_exhaustion.", kind: counter, label: "cause",
		read: func(s *Stats) []series {
			var out []series
			for _, cause := range []string{"max_transfers", "stat_queue", "fd_exhaustion"} {
				out = append(out, series{cause, float64(s.Rejected[cause])})
			}
			return out
		}},
	single(counter, "sendfile_calls_total", "sendfile(2) calls made by the listener wrapper.", func(s *Stats) int64 { return s.SendfileCalls }),
	single(counter, "sendfile_fallbacks_total", "Bodies the listener wrapper had to copy instead.", func(s *Stats) int64 { return s.SendfileFallbacks }),
	single(counter, "sendfile_refused_total", "sendfile(2) calls the kernel refused (EINVAL, ENOSYS, EOPNOTSUPP); the rest of each body was copied.", func(s *Stats) int64 { return s.SendfileRefused }),
	{name: "lookups_total", help: "Lookups of request paths (and index files, sidecars), by result: hit and negative_hit (\"no such file\") answered from the cache with no system call, miss through the filesystem, merged into a miss of the same path in flight.", kind: counter, label: "result",
		read: func(s *Stats) []series {
			l := s.Lookups
			return []series{{"hit", float64(l.Hits)}, {"negative_hit", float64(l.NegativeHits)}, {"miss", float64(l.Misses)}, {"merged", float64(l.Merged)}}
		}},
	single(gauge, "lookup_queue_depth", "Misses waiting for a lookup worker.", func(s *Stats) int64 { return s.Lookups.QueueDepth }),
	{name: "lookup_wait_seconds_total", help: "Time misses spent waiting for a lookup worker.", kind: counter,
		read: func(s *Stats) []series { return []series{{v: s.Lookups.WaitSeconds}} }},
	single(counter, "cache_invalidations_total", "Cached entries dropped because their file or directory changed.", func(s *Stats) int64 { return s.Cache.Invalidations }),
	single(counter, "cache_flushes_total", "Whole-cache flushes (inotify queue overflows).", func(s *Stats) int64 { return s.Cache.Flushes }),
	{name: "cache_evictions_total", help: "Cached entries evicted to stay within a bound: open_file for the descriptors closed for max_open_files (their entry stays), file for the entries of files dropped for max_entries, negative for negative_cache.", kind: counter, label: "entry",
		read: func(s *Stats) []series {
			return []series{{"open_file", float64(s.Cache.Evictions)}, {"file", float64(s.Cache.EntryEvictions)}, {"negative", float64(s.Cache.NegativeEvictions)}}
		}},
	single(counter, "cache_reopens_total", "Hits whose descriptor had been closed for max_open_files, answered by opening the file again without a lookup.", func(s *Stats) int64 { return s.Cache.Reopens }),
	single(counter, "cache_expirations_total", "Cached entries dropped as stale: not asked for within revalidate (twice it for a negative entry of a watched directory).", func(s *Stats) int64 { return s.Cache.Expired }),
	single(counter, "cache_idle_closed_total", "Descriptors on a filesystem mounted below the site's root closed because no request used them for 2 to 4 s (so that it can be unmounted).", func(s *Stats) int64 { return s.Cache.IdleClosed }),
	single(gauge, "cache_open_files", "Descriptors the caches hold open.", func(s *Stats) int64 { return s.Cache.OpenFiles }),
	single(gauge, "cache_open_files_limit", "The most descriptors the caches keep open (max_open_files, summed over the caches).", func(s *Stats) int64 { return s.Cache.MaxOpenFiles }),
	single(gauge, "cache_file_entries_limit", "The most entries of regular files the caches keep, with or without a descriptor (max_entries, summed over the caches).", func(s *Stats) int64 { return s.Cache.MaxEntries }),
	single(gauge, "cache_entries", "Entries cached, negative ones included.", func(s *Stats) int64 { return s.Cache.Entries }),
	single(gauge, "cache_negative_entries", "Cached \"no such file\" answers.", func(s *Stats) int64 { return s.Cache.NegativeEntries }),
	single(gauge, "cache_listings", "Directories listed, whose missing names are answered with no entry.", func(s *Stats) int64 { return s.Cache.Listings }),
	single(gauge, "cache_memory_bytes", "Bytes of small files kept in memory.", func(s *Stats) int64 { return s.Cache.MemoryBytes }),
	single(gauge, "cache_memory_limit_bytes", "The most bytes of small files kept in memory (memory_cache, summed over the caches).", func(s *Stats) int64 { return s.Cache.MemoryBudget }),
	single(gauge, "cache_watched_directories", "Directories inotify watches for the caches.", func(s *Stats) int64 { return s.Cache.WatchedDirs }),
	single(gauge, "cache_watched_directories_limit", "The most directories watched (max_watches, summed over the caches).", func(s *Stats) int64 { return s.Cache.MaxWatches }),
	single(gauge, "cold_read_buffer_bytes", "Bytes of buffers held by io_uring reads of data not in the page cache, within the cold budget.", func(s *Stats) int64 { return s.ColdReads.BufferBytes }),
	single(gauge, "cold_read_buffer_limit_bytes", "The cold budget: the most bytes of buffers io_uring reads hold at once.", func(s *Stats) int64 { return s.ColdReads.BufferLimit }),
	single(gauge, "io_uring_reads_in_flight", "io_uring operations in flight.", func(s *Stats) int64 { return s.ColdReads.RingReads }),
	single(counter, "prewarm_bytes_total", "Bytes read into the page cache by prewarm.", func(s *Stats) int64 { return s.Prewarm.Bytes }),
	single(counter, "prewarm_files_total", "Files read into the page cache by prewarm.", func(s *Stats) int64 { return s.Prewarm.Files }),
	single(gauge, "hot_set_bytes", "Size of the last saved hot set.", func(s *Stats) int64 { return s.Prewarm.HotSetBytes }),
	single(gauge, "hot_set_resident_bytes", "Bytes of the last saved hot set in the page cache when it was saved.", func(s *Stats) int64 { return s.Prewarm.HotSetResidentBytes }),
	single(gauge, "hot_set_unknown_bytes", "Bytes of the last saved hot set whose residency the server cannot know (files it neither owns nor may write).", func(s *Stats) int64 { return s.Prewarm.HotSetUnknownBytes }),

	// The names of 0.1.0, exported for one more release.
	{name: "bytes_total", replacedBy: `bytes_sent_total`},
	{name: "statacc_hits_total", replacedBy: `lookups_total{result="hit"}`},
	{name: "statacc_negative_hits_total", replacedBy: `lookups_total{result="negative_hit"}`},
	{name: "statacc_misses_total", replacedBy: `lookups_total{result="miss"}`},
	{name: "statacc_merged_total", replacedBy: `lookups_total{result="merged"}`},
	{name: "statacc_queue_depth", replacedBy: `lookup_queue_depth`},
	{name: "statacc_wait_seconds_total", replacedBy: `lookup_wait_seconds_total`},
	{name: "statacc_invalidations_total", replacedBy: `cache_invalidations_total`},
	{name: "statacc_flushes_total", replacedBy: `cache_flushes_total`},
	{name: "statacc_evictions_total", replacedBy: `cache_evictions_total{entry="open_file"}`},
	{name: "statacc_negative_evictions_total", replacedBy: `cache_evictions_total{entry="negative"}`},
	{name: "statacc_expired_total", replacedBy: `cache_expirations_total`},
	{name: "statacc_open_files", replacedBy: `cache_open_files`},
	{name: "statacc_entries", replacedBy: `cache_entries`},
	{name: "statacc_memory_bytes", replacedBy: `cache_memory_bytes`},
}

func init() {
	byName := map[string]*metric{}
	for _, m := range metrics {
		byName[m.name] = m
		if m.replacedBy != "" {
			newName, label, _ := strings.Cut(m.replacedBy, "{")
			r := byName[newName]
			m.help, m.kind = "Deprecated: "+m.replacedBy+".", r.kind
			if label == "" {
				m.label, m.read = r.label, r.read
			} else {
				value := label[strings.Index(label, `"`)+1 : len(label)-2] // result="hit"} → hit
				m.read = func(s *Stats) []series {
					for _, x := range r.read(s) {
						if x.label == value {
							return []series{{v: x.v}}
						}
					}
					return nil
				}
			}
		}
		var labels []string
		if m.label != "" {
			labels = []string{m.label}
		}
		m.desc = prometheus.NewDesc(metricsNamespace+m.name, m.help, labels, nil)
	}
}

// Describe implements prometheus.Collector.
func (metricsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range metrics {
		ch <- m.desc
	}
}

// Collect implements prometheus.Collector. A deprecated name and its
// replacement are read from one snapshot, so a scrape has them equal.
func (metricsCollector) Collect(ch chan<- prometheus.Metric) {
	s := snapshot()
	for _, m := range metrics {
		for _, x := range m.read(&s) {
			var labels []string
			if m.label != "" {
				labels = []string{x.label}
			}
			ch <- prometheus.MustNewConstMetric(m.desc, m.kind, x.v, labels...)
		}
	}
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
