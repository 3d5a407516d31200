package flashserve

import (
	"errors"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashserve/caddy-flash-serve/prewarm"
	"github.com/flashserve/caddy-flash-serve/statacc"
	"github.com/flashserve/caddy-flash-serve/transmit"
)

// Stats are the module's numbers, process-wide: the admin API's
// /flash_serve/stats answers them as JSON and the metrics collector
// exports them to Prometheus.
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
	// Statacc sums the counters of every cache, live or retired.
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
func snapshot() Stats {
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
	caches.Range(func(_, v any) bool {
		c := v.(*sharedCache).Snapshot()
		s.Caches++
		s.Statacc.addCounters(c)
		s.Statacc.QueueDepth += c.QueueDepth
		s.Statacc.OpenFiles += c.OpenFiles
		s.Statacc.Entries += c.Entries
		s.Statacc.NegativeCount += c.NegativeEntries
		s.Statacc.MemoryBytes += c.MemoryBytes
		s.Statacc.UnwatchedDirs += c.UnwatchedDirs
		return true
	})
	s.Rejected = map[string]int64{
		"max_transfers": counters.limited.Load(),
		"stat_queue":    s.Statacc.QueueFull,
		"fd_exhaustion": counters.fdExhausted.Load(),
	}
	return s
}

// metricsCollector exports Stats to Prometheus, read when scraped, so
// that the request path only bumps its atomic counters.
type metricsCollector struct{}

const metricsNamespace = "caddy_flash_serve_"

var (
	descRequests  = prometheus.NewDesc(metricsNamespace+"requests_total", "Responses with a body, by the engine that sent it.", []string{"engine"}, nil)
	descBytes     = prometheus.NewDesc(metricsNamespace+"bytes_total", "Body bytes sent, by engine.", []string{"engine"}, nil)
	descInFlight  = prometheus.NewDesc(metricsNamespace+"transfers_in_flight", "Bodies holding a max_transfers place.", nil, nil)
	descRejected  = prometheus.NewDesc(metricsNamespace+"rejected_total", "503 answers, by cause: max_transfers, stat_queue, fd_exhaustion.", []string{"cause"}, nil)
	descSendfile  = prometheus.NewDesc(metricsNamespace+"sendfile_calls_total", "sendfile(2) calls made by the listener wrapper.", nil, nil)
	descFallbacks = prometheus.NewDesc(metricsNamespace+"sendfile_fallbacks_total", "Bodies the listener wrapper had to copy instead.", nil, nil)
	descRefused   = prometheus.NewDesc(metricsNamespace+"sendfile_refused_total", "sendfile(2) calls the kernel refused (EINVAL, ENOSYS, EOPNOTSUPP); the rest of each body was copied.", nil, nil)

	descHits          = prometheus.NewDesc(metricsNamespace+"statacc_hits_total", "Lookups answered from the cache without a system call.", nil, nil)
	descNegativeHits  = prometheus.NewDesc(metricsNamespace+"statacc_negative_hits_total", "Lookups answered \"no such file\" from the cache.", nil, nil)
	descMisses        = prometheus.NewDesc(metricsNamespace+"statacc_misses_total", "Lookups that went to the filesystem.", nil, nil)
	descMerged        = prometheus.NewDesc(metricsNamespace+"statacc_merged_total", "Misses merged into a lookup of the same path already in flight.", nil, nil)
	descQueueDepth    = prometheus.NewDesc(metricsNamespace+"statacc_queue_depth", "Misses waiting for a stat worker.", nil, nil)
	descWait          = prometheus.NewDesc(metricsNamespace+"statacc_wait_seconds_total", "Time requests spent waiting for a stat worker.", nil, nil)
	descInvalidations = prometheus.NewDesc(metricsNamespace+"statacc_invalidations_total", "Entries dropped because the file or its directory changed.", nil, nil)
	descFlushes       = prometheus.NewDesc(metricsNamespace+"statacc_flushes_total", "Whole-cache flushes (inotify queue overflows).", nil, nil)
	descEvictions     = prometheus.NewDesc(metricsNamespace+"statacc_evictions_total", "Entries evicted to keep under max_open_files.", nil, nil)
	descNegEvictions  = prometheus.NewDesc(metricsNamespace+"statacc_negative_evictions_total", "Negative entries evicted to keep under negative_cache.", nil, nil)
	descExpired       = prometheus.NewDesc(metricsNamespace+"statacc_expired_total", "Entries dropped as stale: not asked for within revalidate (twice it for a negative entry of a watched directory).", nil, nil)
	descIdleClosed    = prometheus.NewDesc(metricsNamespace+"statacc_idle_closed_total", "Descriptors on a filesystem mounted below the site's root closed because no request used them for 2 to 4 s (so that it can be unmounted).", nil, nil)
	descOpenFiles     = prometheus.NewDesc(metricsNamespace+"statacc_open_files", "Descriptors the caches hold open.", nil, nil)
	descEntries       = prometheus.NewDesc(metricsNamespace+"statacc_entries", "Entries cached, negative ones included.", nil, nil)
	descMemoryBytes   = prometheus.NewDesc(metricsNamespace+"statacc_memory_bytes", "Bytes of small files kept in memory.", nil, nil)

	descPrewarmBytes = prometheus.NewDesc(metricsNamespace+"prewarm_bytes_total", "Bytes read into the page cache by prewarm.", nil, nil)
	descPrewarmFiles = prometheus.NewDesc(metricsNamespace+"prewarm_files_total", "Files read into the page cache by prewarm.", nil, nil)
	descHotSet       = prometheus.NewDesc(metricsNamespace+"hot_set_bytes", "Size of the last saved hot set.", nil, nil)
	descHotResident  = prometheus.NewDesc(metricsNamespace+"hot_set_resident_bytes", "Bytes of the last saved hot set in the page cache when it was saved.", nil, nil)
	descHotUnknown   = prometheus.NewDesc(metricsNamespace+"hot_set_unknown_bytes", "Bytes of the last saved hot set whose residency the server cannot know (files it neither owns nor may write).", nil, nil)
)

var allDescs = []*prometheus.Desc{descRequests, descBytes, descInFlight, descRejected, descSendfile, descFallbacks, descRefused,
	descHits, descNegativeHits, descMisses, descMerged, descQueueDepth, descWait, descInvalidations, descFlushes,
	descEvictions, descNegEvictions, descExpired, descIdleClosed, descOpenFiles, descEntries, descMemoryBytes, descPrewarmBytes, descPrewarmFiles, descHotSet, descHotResident, descHotUnknown}

// Describe implements prometheus.Collector.
func (metricsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
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
		counter(descBytes, float64(s.Engines[name].Bytes), name)
	}
	gauge(descInFlight, float64(s.TransfersInFlight))
	for _, cause := range []string{"max_transfers", "stat_queue", "fd_exhaustion"} {
		counter(descRejected, float64(s.Rejected[cause]), cause)
	}
	counter(descSendfile, float64(s.SendfileCalls))
	counter(descFallbacks, float64(s.SendfileFallbacks))
	counter(descRefused, float64(s.SendfileRefused))
	st := s.Statacc
	counter(descHits, float64(st.Hits))
	counter(descNegativeHits, float64(st.NegativeHits))
	counter(descMisses, float64(st.Misses))
	counter(descMerged, float64(st.Merged))
	gauge(descQueueDepth, float64(st.QueueDepth))
	counter(descWait, st.WaitSeconds)
	counter(descInvalidations, float64(st.Invalidations))
	counter(descFlushes, float64(st.Flushes))
	counter(descEvictions, float64(st.Evictions))
	counter(descNegEvictions, float64(st.NegativeEvictions))
	counter(descExpired, float64(st.Expired))
	counter(descIdleClosed, float64(st.IdleClosed))
	gauge(descOpenFiles, float64(st.OpenFiles))
	gauge(descEntries, float64(st.Entries))
	gauge(descMemoryBytes, float64(st.MemoryBytes))
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
