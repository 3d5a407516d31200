package statacc

import (
	"sync/atomic"

	"golang.org/x/sys/cpu"
)

// LookupCounts are the lookups of one caller of GetCounted (a site: one
// handler), by how the cache answered them: its share of the cache's
// counters, for a status page that tells sites sharing one cache apart.
// Every hit adds to it, so it sits on cache lines of its own: a site's
// hits do not contend with another site's or with the fields next to it.
type LookupCounts struct {
	_ cpu.CacheLinePad
	// Hits are the lookups answered from a fresh entry, NegativeHits
	// those answered "no such file" from a negative entry or a listing.
	Hits, NegativeHits atomic.Int64
	// Misses are the lookups that went to the filesystem, merged into one
	// in flight, or found the queue full: the cache's Misses, Merged and
	// QueueFull together.
	Misses atomic.Int64
	_      cpu.CacheLinePad
}
