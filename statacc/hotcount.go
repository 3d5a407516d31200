package statacc

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// The hot set's counts live in a count-min sketch: a fixed table of
// counters whatever the number of paths requested, so that a scanner
// walking millions of names cannot grow it. A hit does not touch the
// sketch: it adds one to its entry's own counter, an atomic add on a
// cache line the hit reads anyway, and the entry's count is folded into
// the sketch when the entry leaves the cache (invalidation, eviction, the
// janitor) and at every snapshot. So a count survives its entry, and the
// hot path pays nothing for the sketch.
const (
	sketchRows  = 4
	sketchWidth = 1 << 14 // 4 × 16384 × 4 bytes = 256 KiB per cache
	// maxPending bounds the paths remembered between snapshots because
	// their entry left the cache with hits: they are candidates for the
	// next snapshot even though no entry names them any more.
	maxPending = 4096
)

type hotCounter struct {
	seed maphash.Seed
	rows [sketchRows][sketchWidth]atomic.Uint32

	mu sync.Mutex
	// pending and last are the candidates that no live entry names: the
	// files whose entry left the cache since the last snapshot, and the
	// last snapshot itself. Both are bounded.
	pending []HotFile
	last    []HotFile
}

func newHotCounter() *hotCounter {
	return &hotCounter{seed: maphash.MakeSeed()}
}

func (h *hotCounter) key(path string) uint64 {
	return maphash.String(h.seed, path)
}

// cells gives the counter of each row for a key: double hashing from the
// two halves of one 64-bit hash.
func cellIndex(key uint64, row int) uint32 {
	h1, h2 := uint32(key), uint32(key>>32)|1
	return (h1 + uint32(row)*h2) & (sketchWidth - 1)
}

// add counts n more requests for key, with the conservative update: a
// counter is raised only as far as the new estimate, which keeps the
// overcount of colliding paths low.
func (h *hotCounter) add(key uint64, n uint32) {
	if n == 0 {
		return
	}
	want := h.estimate(key) + n
	if want < n { // saturate rather than wrap
		want = ^uint32(0)
	}
	for r := range sketchRows {
		c := &h.rows[r][cellIndex(key, r)]
		for {
			old := c.Load()
			if old >= want || c.CompareAndSwap(old, want) {
				break
			}
		}
	}
}

// estimate is the count of key: never less than the true count since the
// last halvings, more only by what colliding paths added.
func (h *hotCounter) estimate(key uint64) uint32 {
	est := ^uint32(0)
	for r := range sketchRows {
		est = min(est, h.rows[r][cellIndex(key, r)].Load())
	}
	return est
}

// halve makes old popularity fade.
func (h *hotCounter) halve() {
	for r := range sketchRows {
		for i := range h.rows[r] {
			c := &h.rows[r][i]
			for {
				old := c.Load()
				if old == 0 || c.CompareAndSwap(old, old/2) {
					break
				}
			}
		}
	}
}

// fold moves an entry's hits into the sketch and reports how many there
// were.
func (h *hotCounter) fold(e *Entry) int64 {
	n := e.hits.Swap(0)
	if n > 0 {
		h.add(e.hotKey, uint32(min(n, int64(^uint32(0)))))
	}
	return n
}

// leave is called when a regular file's entry leaves the cache: its hits
// go to the sketch and its path stays a candidate until the next snapshot.
func (h *hotCounter) leave(e *Entry) {
	if h.fold(e) == 0 {
		return
	}
	h.mu.Lock()
	if len(h.pending) < maxPending {
		h.pending = append(h.pending, HotFile{Path: e.Path, Size: e.Size})
	}
	h.mu.Unlock()
}

// HotFile is one entry of a hot-set snapshot.
type HotFile struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	Hits int64  `json:"hits"`
}

// Hottest returns the n regular files with the most requests, hottest
// first, and halves every count, so that the next snapshot favours recent
// use. The candidates are the files the cache holds now, those whose
// entry left it since the last snapshot, and the last snapshot's; their
// counts come from the sketch.
func (c *Cache) Hottest(n int) []HotFile {
	h := c.hot
	seen := make(map[string]int)
	var all []HotFile
	consider := func(f HotFile, key uint64) {
		if _, ok := seen[f.Path]; ok {
			return
		}
		if est := h.estimate(key); est > 0 {
			seen[f.Path] = len(all)
			f.Hits = int64(est)
			all = append(all, f)
		}
	}
	var live []*Entry
	c.entries.Range(func(_, v any) bool {
		if e := v.(*Entry); e.Err == nil && e.Mode.IsRegular() {
			h.fold(e)
			live = append(live, e)
		}
		return true
	})
	for _, e := range live {
		consider(HotFile{Path: e.Path, Size: e.Size}, e.hotKey)
	}
	h.mu.Lock()
	pending, last := h.pending, h.last
	h.pending = nil
	h.mu.Unlock()
	for _, f := range pending {
		consider(f, h.key(f.Path))
	}
	for _, f := range last {
		consider(f, h.key(f.Path))
	}
	slices.SortFunc(all, func(a, b HotFile) int {
		switch {
		case a.Hits > b.Hits:
			return -1
		case a.Hits < b.Hits:
			return 1
		}
		return strings.Compare(a.Path, b.Path)
	})
	top := slices.Clone(all[:min(n, len(all))])
	h.halve()
	h.mu.Lock()
	h.last = top
	h.mu.Unlock()
	return top
}
