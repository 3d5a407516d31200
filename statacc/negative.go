package statacc

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
)

// defaultNegativeEntries bounds the negative cache: an entry costs about
// 80 bytes of heap the collector does not scan, plus its path below the
// site's root (negstore.go), so that a storm of that many distinct
// missing paths is answered from memory.
const defaultNegativeEntries = 65536

// MaxNegativeEntries is the most NegativeEntries may be: a quarter of the
// slots the store can number (negSlotBits a shard), so that a shard runs
// out of them only at four times its share, which a seeded hash does not
// give (a shard out of slots caches no more, insertLocked).
const MaxNegativeEntries = negShards << negSlotBits / 4

// negativeBytesPerEntry and minNegativeBytes bound the bytes of the
// negative entries' paths and roots apart, so that long paths (a client
// asking for files far below a missing directory) make the cache hold
// fewer entries, not more memory.
const (
	negativeBytesPerEntry = 128
	minNegativeBytes      = 1 << 20
)

// defaultListAfter: a directory in which this many names were found
// missing is listed, and its next missing names answered from the listing
// (listing_linux.go).
const defaultListAfter = 8

// The negative cache's replacement policy, once full: a path that
// misses for the first time is answered and not kept (a scanner displaces
// nothing); one seen missing before (the doorkeeper, a lossy table of
// hashes) is kept and evicts what a CLOCK sweep finds unused. While there
// is room every negative is kept.

// doorkeeper remembers, lossily, the paths that missed while the negative
// cache was full: one tag per slot.
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
// cache full, of entries or of bytes (key's own counted, so that an
// admitted entry never overfills it), or negative caching is off.
func (c *Cache) negativesFull(key lookupKey) bool {
	return c.opts.NegativeEntries < 0 || c.counts[NegativeEntries].Load() >= int64(c.opts.NegativeEntries) ||
		c.negatives.bytes.Load()+int64(len(key.root)+len(key.path)) > c.opts.negativeBytes
}

// keepsNegative reports whether a negative answer for key is kept: while
// there is room, when it replaces an entry of the same path, or when the
// path missed before while the cache was full. It marks the doorkeeper.
func (c *Cache) keepsNegative(key lookupKey) bool {
	if c.opts.NegativeEntries < 0 {
		return false
	}
	if !c.negativesFull(key) {
		return true
	}
	path := key.path
	if c.entries.Load(path) != nil || c.negatives.has(path) {
		return true
	}
	return c.door().sawBefore(path)
}

// probeMissing looks up a path whose negative answer would not be kept
// without entering the watcher first, so that a scanner's paths make no
// node and no watch. A missing path gets its error, for this request
// only; one that exists gets its entry from the probe's open, fresh for a
// second (a change between the open and the watch sends no event). ok is
// false when the error says nothing about the path: the caller misses as
// usual.
func (c *Cache) probeMissing(key lookupKey, dir, site string) (_ *Entry, _ error, ok bool) {
	checked := nanotime()
	info, f, links, err := c.open(key)
	if err != nil {
		if !cacheableError(err) {
			return nil, nil, false
		}
		return nil, err, true
	}
	ticket := c.watch.enter(dir)
	c.watch.learnFS(ticket, dir)
	e, err := c.build(key.path, site, info, f, nil, true)
	c.noteLinked(e, links)
	e, err = c.record(key, site, ticket, checked, e, err, admitAsk, true)
	return e, err, true
}

// clock is a ring of cached entries (*Entry for descriptors, negRef for
// negative entries) in the order a CLOCK sweep visits them.
type clock[T comparable] struct {
	mu   sync.Mutex
	ring []T
	hand int
	// dead counts the entries of the ring that left the cache: Cache.drop
	// adds one, their removal from the ring takes it back.
	dead atomic.Int64
	// compactions counts the compactions, which move the entries
	// (Cache.closeIdle stops when they moved).
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

// ringLimit is the longest a ring of bound entries grows before it is
// compacted: twice the bound, saturated.
func ringLimit(bound int) int {
	if bound > (math.MaxInt-compactMin)/2 {
		return math.MaxInt
	}
	return 2*bound + compactMin
}

// needsCompactLocked reports whether k passed its limit or is more than
// half dead: a cache whose entries churn below its bound is never swept.
func (k *clock[T]) needsCompactLocked(bound int) bool {
	n := len(k.ring)
	return n > ringLimit(bound) || n >= compactMin && 2*k.dead.Load() > int64(n)
}

// ringAdd puts a cached entry under the clock, compacting it if need be.
func ringAdd[T comparable](k *clock[T], ops clockOps[T], e T, bound int) {
	k.mu.Lock()
	if ops.gone(e) {
		// Dropped between its publication and here: its drop counted it
		// dead already, and it must not join the ring as a husk.
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
		// Most of the ring left at once: give its room back.
		live = append(make([]T, 0, 2*max(len(live), compactMin)), live...)
	}
	k.ring, k.hand = live, 0
	k.compactions++
}

// tidy compacts k if its dead entries are most of it, after entries
// left in bulk, so that the ring does not keep them until the next entry.
func tidy[T comparable](k *clock[T], ops clockOps[T], bound int) {
	k.mu.Lock()
	// Also a ring emptied earlier, or one of dead entries alone
	// (fewer than compactMin).
	n := len(k.ring)
	// dead may count an entry dropped before its ringAdd.
	allDead := n > 0 && k.dead.Load() >= int64(n)
	if k.needsCompactLocked(bound) || cap(k.ring) >= 4*max(n, compactMin) || allDead || n == 0 && cap(k.ring) > 2*compactMin {
		k.compactLocked(ops)
	}
	k.mu.Unlock()
}

// sweep forgets entries of k while over says there are too many; with
// secondChance, an entry used since the hand last passed loses its mark
// and stays (LRU without a hit writing more than one flag). except, if
// not zero, is not evicted.
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
	if k.needsCompactLocked(bound) {
		k.compactLocked(ops)
	}
}

// unring removes the entry under the hand by moving the last, the
// newest, there: the sweep looks at it next, so entries never hit again
// go before older ones that were. Called with mu held.
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

// fdOps are the descriptors' clock's: its entries are *Entry, and
// evicting one closes its descriptor, not its entry.
type fdOps struct{ c *Cache }

func (o fdOps) gone(e *Entry) bool  { return e.shut.Load() }
func (o fdOps) used(e *Entry) bool  { return e.takeMark(markEvict) }
func (o fdOps) evict(e *Entry) bool { return o.c.shut(e) }

// fileOps are the clock's of regular files' entries (MaxEntries).
type fileOps struct{ c *Cache }

func (o fileOps) gone(m *meta) bool { return m.gone.Load() }
func (o fileOps) used(m *meta) bool { return m.takeMark(markKeep) }
func (o fileOps) evict(m *meta) bool {
	if !o.c.entries.CompareAndDelete(m) {
		return false
	}
	o.c.drop(m)
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

// evictNegatives makes room after r overfilled the negative cache: down
// to fifteen sixteenths of both bounds, so that the sweep runs once per
// sixteenth of the cache. r stays.
func (c *Cache) evictNegatives(r negRef) {
	n, b := c.opts.NegativeEntries, c.opts.negativeBytes
	over := func() bool {
		return c.counts[NegativeEntries].Load() > int64(n-max(1, n/16)) || c.negatives.bytes.Load() > b-b/16
	}
	sweep(&c.negs, negOps{c}, over, n, true, &c.counts[NegativeEvictions], r)
}
