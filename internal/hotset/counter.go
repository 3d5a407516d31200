// Package hotset keeps the hot set: which files clients ask for most. It
// counts requests (a Tally per cached file, folded into a bounded
// sketch), takes snapshots of the hottest files and keeps them in a file
// across restarts (Saver), which prewarm reads back.
package hotset

import (
	"hash/maphash"
	"iter"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// The counts live in a count-min sketch: a fixed table whatever the
// number of paths requested, so that a scanner walking millions of names
// cannot grow it. A hit only adds one to its entry's Tally, on a cache
// line the hit reads anyway; the tally is folded into the sketch when the
// entry leaves the cache and at every snapshot, so a count survives its
// entry and the hot path pays nothing for the sketch.
const (
	sketchRows  = 4
	sketchWidth = 1 << 14 // 4 × 16384 × 4 bytes = 256 KiB per counter
	// minPending is the least bound of the paths remembered between
	// snapshots because their entry left the cache (remember).
	minPending = 4096
)

// File is one file of a snapshot: its path, its size when it was counted,
// and its requests since the counts last decayed.
type File struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	Hits int64  `json:"hits"`
}

// Tally counts the requests for one cached file since they were last
// folded into its Counter: 8 bytes in every cached file's entry. It does
// not keep the path's key in the sketch: the counter hashes the path
// again when it folds the tally (a snapshot, the entry's departure),
// which is rare beside the hits. The zero Tally is ready to count.
type Tally struct {
	// hits stops at its maximum rather than wrap, should 2^32 requests
	// come between two folds: the sketch's counts stop there too.
	hits    atomic.Uint32
	counted atomic.Bool // a hit reached the sketch
}

// Hit counts one request: the only call on the hot path.
func (t *Tally) Hit() {
	if t.hits.Add(1) == 0 {
		t.hits.Store(^uint32(0)) // wrapped: stop at the top
	}
}

// Counter is the sketch of one cache's request counts, with the
// candidates for its next snapshot.
type Counter struct {
	seed maphash.Seed
	rows [sketchRows][sketchWidth]atomic.Uint32
	// live yields the files the cache holds now, with their tallies.
	live iter.Seq2[File, *Tally]

	mu sync.Mutex
	// pending and last are the candidates that no live entry names: the
	// files whose entry left the cache since the last snapshot, by key
	// (at most maxPending), and the last snapshot. pending is a set: on a
	// tree larger than the cache, a file's entry leaves each time it is
	// asked for, and repeats must not fill the bound.
	pending    map[uint64]File
	last       []File
	maxPending int
}

// NewCounter returns an empty counter. live yields the regular files the
// cache holds at the time of a snapshot, each with its tally.
func NewCounter(live iter.Seq2[File, *Tally]) *Counter {
	return &Counter{seed: maphash.MakeSeed(), live: live, maxPending: minPending}
}

// remember makes the counter keep up to n files whose entries left the
// cache between two snapshots, so that a snapshot of n files can name
// files the cache no longer holds. The bound only grows.
func (c *Counter) remember(n int) {
	c.mu.Lock()
	c.maxPending = max(c.maxPending, n)
	c.mu.Unlock()
}

func (c *Counter) key(path string) uint64 {
	return maphash.String(c.seed, path)
}

// cellIndex gives the counter of a row for a key: double hashing from
// the two halves of one 64-bit hash.
func cellIndex(key uint64, row int) uint32 {
	h1, h2 := uint32(key), uint32(key>>32)|1
	return (h1 + uint32(row)*h2) & (sketchWidth - 1)
}

// add counts n more requests for key, with the conservative update: a
// counter is raised only as far as the new estimate, which keeps the
// overcount of colliding paths low.
func (c *Counter) add(key uint64, n uint32) {
	if n == 0 {
		return
	}
	want := c.estimate(key) + n
	if want < n { // saturate rather than wrap
		want = ^uint32(0)
	}
	for r := range sketchRows {
		cell := &c.rows[r][cellIndex(key, r)]
		for {
			old := cell.Load()
			if old >= want || cell.CompareAndSwap(old, want) {
				break
			}
		}
	}
}

// estimate is the count of key: never less than the true count since the
// last decays, more only by what colliding paths added.
func (c *Counter) estimate(key uint64) uint32 {
	est := ^uint32(0)
	for r := range sketchRows {
		est = min(est, c.rows[r][cellIndex(key, r)].Load())
	}
	return est
}

// fold moves a tally's hits into the sketch, under key (its path's),
// and reports how many there were.
func (c *Counter) fold(t *Tally, key uint64) int64 {
	n := t.hits.Swap(0)
	if n > 0 {
		c.add(key, n)
		t.counted.Store(true)
	}
	return int64(n)
}

// Leave is called when the entry of f, counted by t, leaves the cache:
// its hits go to the sketch and f stays a candidate until the next
// snapshot. An entry that leaves before any hit of it was counted counts
// one, for the request that made it: a full cache may evict a new entry
// before that request's hit lands on it.
func (c *Counter) Leave(t *Tally, f File) {
	key := c.key(f.Path)
	if c.fold(t, key) == 0 {
		if t.counted.Swap(true) {
			return
		}
		c.add(key, 1)
	}
	c.mu.Lock()
	if _, seen := c.pending[key]; seen || len(c.pending) < c.maxPending {
		if c.pending == nil {
			c.pending = make(map[uint64]File)
		}
		c.pending[key] = f
	}
	c.mu.Unlock()
}

// Carry takes in the snapshot an earlier process saved (Load): its
// files' counts, halved as the decay after that save halved them, go into
// the sketch and they are candidates of the next snapshot. So a server
// that stops soon after a restart still saves the set it started with,
// and a file no longer asked for fades by half at each save, across
// restarts as within one process.
func (c *Counter) Carry(files []File) {
	for _, f := range files {
		if n := f.Hits / 2; n > 0 {
			c.add(c.key(f.Path), uint32(min(n, int64(^uint32(0)))))
		}
	}
	c.mu.Lock()
	c.last = append(c.last, files...)
	c.mu.Unlock()
}

// Top returns the files with the most requests, hottest first: n files
// at most and, when bytes is positive, only as many as bytes holds, the
// one that crosses it included. The candidates are the files the cache
// holds now, those whose entry left it since the last snapshot, and the
// last snapshot's. Top folds the live tallies into the sketch and makes
// its answer the next snapshot's candidates in place of those that left.
func (c *Counter) Top(n int, bytes int64) []File {
	seen := make(map[string]bool)
	var all []File
	consider := func(f File, key uint64) {
		if seen[f.Path] {
			return
		}
		if est := c.estimate(key); est > 0 {
			seen[f.Path] = true
			f.Hits = int64(est)
			all = append(all, f)
		}
	}
	type liveFile struct {
		f   File
		key uint64
	}
	// Fold every live tally before reading any estimate, so that no count
	// is read half folded.
	var live []liveFile
	if c.live != nil {
		for f, t := range c.live {
			key := c.key(f.Path)
			c.fold(t, key)
			live = append(live, liveFile{f, key})
		}
	}
	for _, l := range live {
		consider(l.f, l.key)
	}
	c.mu.Lock()
	pending, last := c.pending, c.last
	c.pending = nil
	c.mu.Unlock()
	for key, f := range pending {
		consider(f, key)
	}
	for _, f := range last {
		consider(f, c.key(f.Path))
	}
	slices.SortFunc(all, func(a, b File) int {
		switch {
		case a.Hits > b.Hits:
			return -1
		case a.Hits < b.Hits:
			return 1
		}
		return strings.Compare(a.Path, b.Path)
	})
	all = all[:min(n, len(all))]
	if bytes > 0 {
		var sum int64
		for i, f := range all {
			if sum += f.Size; sum >= bytes {
				all = all[:i+1]
				break
			}
		}
	}
	top := slices.Clone(all)
	c.mu.Lock()
	c.last = top
	c.mu.Unlock()
	return top
}

// Decay halves every count, so that old popularity fades: a file asked
// for once drops out of the next snapshot unless it is asked for again.
func (c *Counter) Decay() {
	for r := range sketchRows {
		for i := range c.rows[r] {
			cell := &c.rows[r][i]
			for {
				old := cell.Load()
				if old == 0 || cell.CompareAndSwap(old, old/2) {
					break
				}
			}
		}
	}
}
