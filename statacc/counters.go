package statacc

import "sync/atomic"

// Stat names one of a cache's counters or gauges: the counters come first
// and only grow during the cache's life.
type Stat uint8

const (
	Hits         Stat = iota // answered from a fresh entry
	NegativeHits             // answered "no such file" from a negative entry or a listing
	Misses                   // went to the filesystem
	Merged                   // waited for a miss of the same path in flight
	Wait                     // nanoseconds misses spent waiting for a worker
	QueueFull                // misses refused with ErrQueueFull
	// Invalidations count the entries dropped because their file or
	// directory changed, Flushes the whole-cache flushes (an inotify queue
	// overflow), Evictions the descriptors closed to stay under
	// MaxOpenFiles, NegativeEvictions the negative entries dropped for one
	// that missed again while the negative cache was full.
	Invalidations
	Flushes
	Evictions
	NegativeEvictions
	// EntryEvictions count the entries of regular files dropped to stay
	// under MaxEntries, Reopens the hits whose descriptor had been closed
	// and were answered by opening the file again (Cache.reopen).
	EntryEvictions
	Reopens
	// Expired counts the entries the janitor dropped as no longer fresh,
	// IdleClosed those on another mount than their site's root it dropped
	// as idle (closeIdle), Shed the lookups that found the fd table full
	// and closed idle descriptors to make room.
	Expired
	IdleClosed
	Shed
	WatchRefused // lookups left unwatched because MaxWatches was reached

	OpenFiles       // descriptors held open, cached or still in use
	NegativeEntries // cached "no such file" answers
	MemoryBytes     // file content kept in memory
	UnwatchedDirs   // directories whose inotify watch failed
	Watches         // inotify watches held
	WatchedDirs     // directories the watcher keeps, which MaxWatches bounds
	Listings        // directories listed now (listing_linux.go)
	QueueDepth      // misses waiting for a worker
	Entries         // every cached entry: Snapshot only, since it walks the map
	numStats

	// What follows is not in Counters.
	slotLookups           // misses resolved holding a filesystem slot
	cachedLookups         // misses answered from the dentry cache without a slot (resolveCached)
	listedMisses          // NegativeHits answered from a listing
	negativeRevalidations // negative entries looked up again in place (revalidateNegative)
	dirEntries            // cached entries without a descriptor
	fileEntries           // cached entries of regular files, which MaxEntries bounds
	watchEvictions        // watched directories forgotten to stay under MaxWatches
	numCounts
)

// Counter reports whether s only grows, rather than going up and down.
func (s Stat) Counter() bool { return s < OpenFiles }

// Counters are a cache's counters and gauges at one moment, by Stat.
type Counters [numStats]int64

// counters are a cache's live counts, each updated atomically.
type counters [numCounts]atomic.Int64

// Snapshot reads the cache's counters now. It walks the map to count the
// entries, so it is meant for the metrics and the admin API.
func (c *Cache) Snapshot() Counters {
	s := c.Counts()
	s[Entries] = int64(c.entryCount())
	return s
}

// Counts is Snapshot without Entries (left 0), and so without its walk of
// the map: cheap enough for a sampler that reads it every few seconds.
func (c *Cache) Counts() Counters {
	var s Counters
	for i := range s {
		s[i] = c.counts[i].Load()
	}
	s[QueueDepth] = int64(len(c.jobs))
	return s
}

// ShedCount is the Shed counter alone, one atomic load, for those that
// back off when descriptors run short (a warm-up).
func (c *Cache) ShedCount() int64 { return c.counts[Shed].Load() }
