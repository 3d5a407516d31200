package statacc

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
)

// defaultNegativeEntries is the default bound of the negative cache: a
// cached "no such file" answer costs about 150 bytes of Go heap plus its
// path (TestHeapPerEntry, BenchmarkNegativeHit's heapB/negative: its slot
// of 56 bytes, its share of the store's index, of the clock's ring and of
// the watcher's index, and the doorkeeper's 4 bytes), and its path and
// root once more at most while freed arena bytes wait for compaction
// (negstore.go), so 65,536 of them take about 16 MiB with paths of 100
// bytes, none of it scanned by the collector, and a storm of that many
// distinct missing paths is answered from memory. Paths and roots are
// bounded apart (negativeBytesPerEntry), so longer ones make the cache
// hold fewer entries, not more memory: about 20 MiB at worst.
const defaultNegativeEntries = 65536

// negativeBytesPerEntry and minNegativeBytes make the bound of the bytes
// the negative entries' paths and roots take (Options.NegativeEntries):
// 8 MiB for the default count, which holds it with paths of 128 bytes on
// average. Without it, 65,536 distinct paths of 3.4 KB (a client asking for
// files 380 directories below one that does not exist) would hold 220 MiB,
// and up to twice that in arenas waiting for compaction. The arenas hold
// 1.25 times their live bytes at most (negstore.go): 1 MiB of 3.4 KB
// paths kept 2 MB of heap in all (TestLongMissingPathsStayUnderTheByteBound).
const (
	negativeBytesPerEntry = 128
	minNegativeBytes      = 1 << 20
)

// defaultListAfter is Options.listAfter's default: a directory in which
// eight names were looked up and found missing, each with a failed open,
// is listed, and the next missing names are answered from the listing
// with no system call and no memory of their own (listing_linux.go).
const defaultListAfter = 8

// The negative cache's replacement policy, for a cache that is full:
//
//   - A path that misses for the first time is answered and not kept: a
//     scanner, whose paths are all distinct, costs one failed open per
//     request and displaces nothing (the open is made before the watcher
//     is entered: see probeMissing).
//   - A path seen missing before (remembered by the doorkeeper, a table of
//     hashes as large as the cache, about 4 bytes an entry) is kept, and
//     makes room by evicting the entries a CLOCK sweep finds unused since
//     it last passed: a negative hit marks its entry, so the paths that
//     are asked again stay.
//
// While there is room every negative is kept, so a storm of repeated
// missing paths that fits is answered from memory from its second
// request on.

// doorkeeper remembers, lossily, the paths that missed while the negative
// cache was full: one tag per slot, overwritten by any later path that
// hashes to the same slot.
type doorkeeper struct {
	seed  maphash.Seed
	slots []atomic.Uint32
}

func newDoorkeeper(entries int) *doorkeeper {
	n := 1024
	for n < entries {
		n *= 2
	}
	return &doorkeeper{seed: maphash.MakeSeed(), slots: make([]atomic.Uint32, n)}
}

// sawBefore reports whether path was marked since its slot was last
// taken, and marks it.
func (d *doorkeeper) sawBefore(path string) bool {
	h := maphash.String(d.seed, path)
	s := &d.slots[h&uint64(len(d.slots)-1)]
	tag := uint32(h>>32) | 1 // never 0, an empty slot
	if s.Load() == tag {
		return true
	}
	s.Store(tag)
	return false
}

// door returns the cache's doorkeeper, made by the first miss that finds
// the negative cache full.
func (c *Cache) door() *doorkeeper {
	if d := c.doors.Load(); d != nil {
		return d
	}
	c.doors.CompareAndSwap(nil, newDoorkeeper(c.opts.NegativeEntries))
	return c.doors.Load()
}

// negativesFull reports whether a new negative entry for key finds the
// cache full, of entries or of their paths' bytes (key's own counted: an
// entry admitted while there is room must not overfill the cache, or its
// eviction would make room for the next distinct path, and a storm of
// long ones would churn the store), or negative caching is off.
func (c *Cache) negativesFull(key lookupKey) bool {
	return c.opts.NegativeEntries < 0 || c.counts[NegativeEntries].Load() >= int64(c.opts.NegativeEntries) ||
		c.negatives.bytes.Load()+int64(len(key.root)+len(key.path)) > c.opts.negativeBytes
}

// keepsNegative reports whether a negative answer for key is to be kept:
// yes while there is room, when it replaces a cached entry of the same
// path (a revalidation), or when the path missed before while the cache
// was full. It marks the path in the doorkeeper.
func (c *Cache) keepsNegative(key lookupKey) bool {
	if c.opts.NegativeEntries < 0 {
		return false
	}
	if !c.negativesFull(key) {
		return true
	}
	path := key.path
	if _, ok := c.entries.Load(path); ok || c.negatives.has(path) {
		return true
	}
	return c.door().sawBefore(path)
}

// probeMissing looks up a path whose negative answer would not be kept,
// in a directory the watcher does not know yet, without entering the
// watcher first: a scanner's paths make no node and no watch. A missing
// path gets an entry for this request only. A path that exists is not
// opened again: its entry is built from the probe's open, after the
// directory is entered, and is fresh for at most a second (a change
// between the open and the watch sends no event); the next lookup after
// that finds the directory watched. It returns nil when the error says
// nothing about the path (the fd table is full, a permission): the caller
// then looks it up as any miss.
func (c *Cache) probeMissing(key lookupKey, dir, site string) *Entry {
	checked := nanotime()
	info, f, links, err := c.open(key)
	if err != nil {
		if !cacheableError(err) {
			return nil
		}
		return &Entry{path: key.path, err: err, root: key.root, symlinks: key.mode}
	}
	ticket := c.watch.enter(dir)
	c.watch.learnFS(ticket, dir)
	e := c.build(key.path, site, info, f, nil, true)
	c.noteLinked(e, links)
	return c.record(key, ticket, checked, e, admitAsk, true)
}

// clock is a ring of cached entries (*Entry for the descriptors, negRef
// for the negative entries) in the order a CLOCK sweep visits them; hand
// is the sweep's position.
type clock[T comparable] struct {
	mu   sync.Mutex
	ring []T
	hand int
	// dead counts the entries of the ring that left the cache (or are
	// about to join it, dropped already): Cache.drop adds one, their
	// removal from the ring takes it back.
	dead atomic.Int64
	// compactions counts the compactions, which move the entries: a walk
	// that lets go of mu in between (Cache.closeIdle) stops when it moved.
	compactions uint64
}

// clockOps is what a sweep asks of the entries of its ring.
type clockOps[T any] interface {
	// gone reports whether the entry left the cache.
	gone(T) bool
	// used reports whether a hit marked the entry since the last call, and
	// takes the mark.
	used(T) bool
	// evict forgets the entry, reporting false if it had left already.
	evict(T) bool
}

// compactMin is the shortest ring compacted for its dead entries alone.
const compactMin = 64

// ringLimit is the longest a ring meant to hold bound entries grows
// before it is compacted whatever it holds: twice the bound, saturated
// (a bound of math.MaxInt is a user's "unlimited").
func ringLimit(bound int) int {
	if bound > (math.MaxInt-compactMin)/2 {
		return math.MaxInt
	}
	return 2*bound + compactMin
}

// needsCompactLocked reports whether k is to be compacted: it passed its
// limit, or more than half of it is dead. The second keeps a cache whose
// entries churn below its bound (expired, purged, invalidated, and so
// never swept) from holding as many dropped entries as live ones; it
// costs a walk per half a ring of drops, so the work per drop stays
// constant. Called with k.mu held.
func (k *clock[T]) needsCompactLocked(bound int) bool {
	n := len(k.ring)
	return n > ringLimit(bound) || n >= compactMin && 2*k.dead.Load() > int64(n)
}

// ringAdd puts a cached entry under the clock. bound is the most entries
// the ring is meant to hold: past twice that, or when dropped entries are
// most of it, the entries that left the cache since (invalidated,
// expired, replaced) are compacted away, so that a cache whose entries
// churn below its bound, and so is never swept, does not keep them.
func ringAdd[T comparable](k *clock[T], ops clockOps[T], e T, bound int) {
	k.mu.Lock()
	if ops.gone(e) {
		// Dropped between its publication and here (its directory deleted
		// meanwhile): its drop counted it dead already, and the batch's
		// tidy may have gone by, so it must not join the ring as a husk.
		k.dead.Add(-1)
		k.mu.Unlock()
		return
	}
	k.ring = append(k.ring, e)
	if k.needsCompactLocked(bound) {
		k.compactLocked(ops)
	}
	k.mu.Unlock()
}

// compactLocked removes from k the entries no longer in the cache. Called
// with k.mu held.
func (k *clock[T]) compactLocked(ops clockOps[T]) {
	live := k.ring[:0]
	for _, e := range k.ring {
		if !ops.gone(e) {
			live = append(live, e)
		}
	}
	k.dead.Add(-int64(len(k.ring) - len(live)))
	clear(k.ring[len(live):])
	if cap(live) >= 4*max(len(live), compactMin) || len(live) == 0 && cap(live) > 2*compactMin {
		// Most of the ring left at once (the janitor's expiry of a storm,
		// a purge, a deleted directory), or all of it: give its room back
		// rather than keep it for the peak.
		live = append(make([]T, 0, 2*max(len(live), compactMin)), live...)
	}
	k.ring, k.hand = live, 0
	k.compactions++
}

// tidy compacts k if its dead entries are most of it, as ringAdd would:
// for the janitor and the watcher, after they dropped entries in bulk (an
// expiry, a purge, a deleted directory), so that the ring does not keep
// them (and the descriptors' ring their husks) until the next entry comes.
func tidy[T comparable](k *clock[T], ops clockOps[T], bound int) {
	k.mu.Lock()
	// A ring already emptied by an earlier batch still gives its room back,
	// and one left with dead entries alone (fewer than compactMin, which
	// needsCompactLocked leaves to the next arrival) gives them up.
	n := len(k.ring)
	// dead may count, beside the ring's, an entry dropped before its
	// ringAdd: at least n is all of them.
	allDead := n > 0 && k.dead.Load() >= int64(n)
	if k.needsCompactLocked(bound) || cap(k.ring) >= 4*max(n, compactMin) || allDead || n == 0 && cap(k.ring) > 2*compactMin {
		k.compactLocked(ops)
	}
	k.mu.Unlock()
}

// sweep forgets entries of k while over says there are too many. With
// secondChance, an entry used since the hand last passed loses its mark
// and stays. This approximates LRU without making a hit write anything
// but one flag. evicted counts the entries forgotten; bound is the most
// entries the ring is meant to hold, past twice which the entries that
// left the cache behind the hand are compacted away. except, if not the
// zero value, is not evicted: the entry whose arrival made the sweep
// necessary.
func sweep[T comparable](k *clock[T], ops clockOps[T], over func() bool, bound int, secondChance bool, evicted *atomic.Int64, except T) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var none T
	for steps := 0; over() && len(k.ring) > 0 && steps < 3*len(k.ring); steps++ {
		if k.hand >= len(k.ring) {
			k.hand = 0
		}
		e := k.ring[k.hand]
		if ops.gone(e) {
			k.unring() // invalidated or replaced since: no longer the cache's to drop
			continue
		}
		if except != none && e == except || secondChance && ops.used(e) {
			k.hand++
			continue
		}
		// Fails if e left the cache since, and its drop is on its way.
		if ops.evict(e) {
			evicted.Add(1)
		}
		k.unring()
	}
	// Entries invalidated behind the hand stay in the ring until it comes
	// round; keep it from growing without bound meanwhile.
	if k.needsCompactLocked(bound) {
		k.compactLocked(ops)
	}
}

// unring removes the entry under the hand, by moving the last one there.
// The last is the newest: the sweep looks at it next, and evicts it if
// nothing used it since it came. So entries that were never hit again go
// before older ones that were, which keeps a part of a cycle of more
// files than the cache holds (e's wrk list) instead of none. The entry is
// dropped, or its drop is on its way, so it leaves the dead count. Called
// with mu held.
func (k *clock[T]) unring() { k.removeAt(k.hand) }

// removeAt is unring for the entry at i.
func (k *clock[T]) removeAt(i int) {
	var none T
	k.dead.Add(-1)
	last := len(k.ring) - 1
	k.ring[i] = k.ring[last]
	k.ring[last] = none
	k.ring = k.ring[:last]
}

// fdOps are the descriptors' clock's: its entries are *Entry.
type fdOps struct{ c *Cache }

func (o fdOps) gone(e *Entry) bool { return e.gone.Load() }
func (o fdOps) used(e *Entry) bool { return e.takeMark(markEvict) }
func (o fdOps) evict(e *Entry) bool {
	if !o.c.entries.CompareAndDelete(e.path, e) {
		return false
	}
	o.c.drop(e)
	return true
}

// negOps are the negative clock's: its entries name slots of the store.
type negOps struct{ c *Cache }

func (o negOps) gone(r negRef) bool {
	live, _ := o.c.negatives.live(r, false)
	return !live
}
func (o negOps) used(r negRef) bool {
	_, used := o.c.negatives.live(r, true)
	return used
}
func (o negOps) evict(r negRef) bool {
	g, ok := o.c.negatives.removeRef(r)
	if ok {
		o.c.watch.forgetNegative(g)
	}
	return ok
}

// evictNegatives makes room in a negative cache that the admission of r
// overfilled, of entries or of bytes: down to fifteen sixteenths of both
// bounds, so that the sweep runs once per sixteenth of the cache rather
// than once per miss. r stays: the sweep looks at the newest entries
// first (unring).
func (c *Cache) evictNegatives(r negRef) {
	n, b := c.opts.NegativeEntries, c.opts.negativeBytes
	over := func() bool {
		return c.counts[NegativeEntries].Load() > int64(n-max(1, n/16)) || c.negatives.bytes.Load() > b-b/16
	}
	sweep(&c.negs, negOps{c}, over, n, true, &c.counts[NegativeEvictions], r)
}
