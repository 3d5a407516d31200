package statacc

import (
	"bytes"
	"errors"
	"hash/maphash"
	"io/fs"
	"sync"
	"sync/atomic"
	"syscall"
)

// negStore holds the negative entries in memory the garbage collector
// does not scan: a storm of missing paths kept as *Entry cost more CPU in
// marking than a hit costs in all. An entry is a slot of a pointer-free
// struct, found through a map from its path's 64-bit hash, with its root
// and path in a byte arena that a hit compares, so that two paths with one
// hash never answer for each other (the later replaces the earlier).
//
// The store is sharded by hash, each shard under its own RWMutex: a hit
// takes one shard's read lock and allocates nothing. Others (the watcher,
// the negative clock) name an entry by a negRef whose seq changes when the
// slot is freed, so that a reference to a gone entry finds it gone.
type negStore struct {
	// hash is maphash of the path; tests replace it to force collisions.
	hash   func(path string) uint64
	seed   maphash.Seed
	seq    atomic.Uint64
	shards [negShards]negShard
	// count and dead are the cache's NegativeEntries and its negative
	// clock's dead count.
	count, dead *atomic.Int64
	// bytes is what live roots and paths take (Options.negativeBytes).
	bytes atomic.Int64
}

const (
	negShards = 64
	// negChunk is the slots of one allocation: slots never move.
	negChunk = 32
	// negArenaMin is the smallest arena.
	negArenaMin = 4096
)

// negShard is one part of the store.
type negShard struct {
	mu     sync.RWMutex
	index  map[uint64]uint32 // hash → slot number
	chunks []*[negChunk]negSlot
	free   []uint32 // freed slot numbers
	// arena holds live slots' roots and paths, and freed ones' garbage.
	arena   []byte
	garbage int
	// peak is the most entries index held: a Go map keeps that room.
	peak int
	_    [24]byte // keeps neighbouring shards' locks off one cache line
}

// negSlot is one negative entry. It holds no pointer.
type negSlot struct {
	// seq is the entry's number, unique in the cache's life; 0 while free.
	seq  atomic.Uint64
	hash uint64
	// node is the watcher's id of the entry's directory node (0: none); mark
	// that node's LRU mark (-1: none).
	node uint64
	// checked is the nanotime of the lookup that found the path missing;
	// staleSince if its directory changed while it was looked up.
	checked          atomic.Int64
	off              uint32 // root then path, in the shard's arena
	rootLen, pathLen uint32
	mark             int32
	kind             negKind
	// refusedAt: the refusal that made the entry named the path (an openat2
	// PathError), as a hit's must.
	refusedAt bool
	symlinks  Symlinks
	watched   bool
	used      atomic.Bool // the negative clock's mark
	gone      atomic.Bool // freed (a reference to it finds it left the cache)
}

// negRef names a negative entry from outside its shard.
type negRef struct {
	seq   uint64
	slot  uint32
	shard uint32
}

type negGone struct {
	node, hash, seq uint64
}

// negKind is the error a negative entry answers with, one value each, so
// that a hit allocates no error.
type negKind uint8

const (
	negNotExist negKind = iota
	negNotDir
	negSymlink
	negEscape
)

var negErrors = [...]error{
	negNotExist: &fs.PathError{Op: "open", Path: "(cached)", Err: syscall.ENOENT},
	negNotDir:   &fs.PathError{Op: "open", Path: "(cached)", Err: syscall.ENOTDIR},
	negSymlink:  &fs.PathError{Op: "openat2", Path: "(cached)", Err: errSymlink},
	negEscape:   &fs.PathError{Op: "openat2", Path: "(cached)", Err: errEscape},
}

// hitError is the error a negative hit of path answers with. A 404 says
// nothing of its error, so a missing path takes its kind's one value; a
// refusal is a 403 whose error Caddy logs, so it is made again as the
// lookup returned it (one allocation, on refusals only).
func hitError(kind negKind, refusedAt bool, path string) error {
	if kind != negSymlink && kind != negEscape {
		return negErrors[kind]
	}
	refusal := errSymlink
	if kind == negEscape {
		refusal = errEscape
	}
	if !refusedAt {
		return refusal
	}
	return &fs.PathError{Op: "openat2", Path: path, Err: refusal}
}

func refusedAtPath(err error, path string) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && pe.Op == "openat2" && pe.Path == path
}

// kindOf classifies a cacheable error.
func kindOf(err error) negKind {
	switch {
	case errors.Is(err, errSymlink):
		return negSymlink
	case errors.Is(err, errEscape):
		return negEscape
	case errors.Is(err, syscall.ENOTDIR):
		return negNotDir
	}
	return negNotExist
}

func newNegStore(count, dead *atomic.Int64) *negStore {
	s := &negStore{seed: maphash.MakeSeed(), count: count, dead: dead}
	s.hash = func(p string) uint64 { return maphash.String(s.seed, p) }
	return s
}

func (s *negStore) shardOf(h uint64) (*negShard, uint32) {
	i := uint32(h>>32) % negShards
	return &s.shards[i], i
}

func (sh *negShard) slot(i uint32) *negSlot { return &sh.chunks[i/negChunk][i%negChunk] }

// root and path return a slot's bytes; valid under the shard's lock.
func (sh *negShard) rootOf(sl *negSlot) []byte { return sh.arena[sl.off : sl.off+sl.rootLen] }
func (sh *negShard) pathOf(sl *negSlot) []byte {
	return sh.arena[sl.off+sl.rootLen : sl.off+sl.rootLen+sl.pathLen]
}

// findLocked returns the live slot of path, nil if none. sh.mu held.
func (sh *negShard) findLocked(h uint64, path string) (*negSlot, uint32) {
	i, ok := sh.index[h]
	if !ok {
		return nil, 0
	}
	sl := sh.slot(i)
	if int(sl.pathLen) != len(path) || string(sh.pathOf(sl)) != path {
		return nil, 0 // another path with the same hash
	}
	return sl, i
}

// negNew is a negative entry to insert.
type negNew struct {
	root, path string
	symlinks   Symlinks
	kind       negKind
	refusedAt  bool
	watched    bool
	checked    int64
	node       uint64
	mark       int32
}

// insertLocked stores n under hash h in place of what the hash's slot
// held (old, for its unindexing). sh.mu held for writing.
func (s *negStore) insertLocked(sh *negShard, shard uint32, h uint64, n negNew) (ref negRef, old negGone, replaced bool) {
	// Before the index changes: compaction walks the live slots.
	sh.compactLocked(len(n.root) + len(n.path))
	i, ok := sh.index[h]
	var sl *negSlot
	if ok {
		sl = sh.slot(i)
		old, replaced = negGone{node: sl.node, hash: h, seq: sl.seq.Load()}, true
		sh.garbage += int(sl.rootLen + sl.pathLen)
		s.bytes.Add(-int64(sl.rootLen + sl.pathLen))
		s.dead.Add(1) // the old entry's place on the clock
	} else {
		if k := len(sh.free); k > 0 {
			i = sh.free[k-1]
			sh.free = sh.free[:k-1]
		} else {
			i = uint32(len(sh.chunks) * negChunk)
			for j := range negChunk {
				if j > 0 {
					sh.free = append(sh.free, i+uint32(negChunk-j))
				}
			}
			sh.chunks = append(sh.chunks, new([negChunk]negSlot))
		}
		if sh.index == nil {
			sh.index = make(map[uint64]uint32)
		}
		sh.index[h] = i
		sh.peak = max(sh.peak, len(sh.index))
		sl = sh.slot(i)
		s.count.Add(1)
	}
	sl.off = uint32(len(sh.arena))
	sh.arena = append(append(sh.arena, n.root...), n.path...)
	s.bytes.Add(int64(len(n.root) + len(n.path)))
	sl.hash, sl.node, sl.mark = h, n.node, n.mark
	sl.rootLen, sl.pathLen = uint32(len(n.root)), uint32(len(n.path))
	sl.kind, sl.refusedAt, sl.symlinks, sl.watched = n.kind, n.refusedAt, n.symlinks, n.watched
	sl.checked.Store(n.checked)
	sl.used.Store(false)
	sl.gone.Store(false)
	seq := s.seq.Add(1)
	sl.seq.Store(seq)
	return negRef{seq: seq, slot: i, shard: shard}, old, replaced
}

func (s *negStore) freeLocked(sh *negShard, i uint32) negGone {
	sl := sh.slot(i)
	g := negGone{node: sl.node, hash: sl.hash, seq: sl.seq.Load()}
	delete(sh.index, sl.hash)
	sh.garbage += int(sl.rootLen + sl.pathLen)
	s.bytes.Add(-int64(sl.rootLen + sl.pathLen))
	sl.seq.Store(0)
	sl.gone.Store(true)
	sh.free = append(sh.free, i)
	s.count.Add(-1)
	s.dead.Add(1)
	if len(sh.index) == 0 {
		// Nothing live: start the arena again rather than compacting.
		sh.arena, sh.garbage = sh.arena[:0], 0
	}
	return g
}

// compactLocked makes room in a full arena by rewriting the live bytes
// into one a quarter larger than they and the new bytes: an arena never
// holds more than 1.25 times its live bytes when it grows, and the bytes
// copied stay within five times those appended.
func (sh *negShard) compactLocked(more int) {
	if len(sh.arena)+more <= cap(sh.arena) {
		return
	}
	sh.rewriteArenaLocked(more)
}

func (sh *negShard) rewriteArenaLocked(more int) {
	need := len(sh.arena) - sh.garbage + more
	arena := make([]byte, 0, max(need+need/4, negArenaMin))
	for _, i := range sh.index {
		sl := sh.slot(i)
		n := sl.rootLen + sl.pathLen
		off := uint32(len(arena))
		arena = append(arena, sh.arena[sl.off:sl.off+n]...)
		sl.off = off
	}
	sh.arena, sh.garbage = arena, 0
}

// shrinkLocked gives back the room of entries that left in bulk: the
// arena, if rewriting would halve it, and the index, made anew at a
// quarter of its peak (neither an arena's garbage nor a map's room is
// given back otherwise). Slots stay: free ones are reused first.
func (sh *negShard) shrinkLocked() {
	if live := len(sh.arena) - sh.garbage; cap(sh.arena) >= 2*max(2*live, negArenaMin) {
		sh.rewriteArenaLocked(0)
	}
	if n := len(sh.index); sh.peak >= 4*max(n, negChunk) {
		index := make(map[uint64]uint32, n)
		for h, i := range sh.index {
			index[h] = i
		}
		sh.index, sh.peak = index, n
	}
}

// shrink lets every shard give back its room (shrinkLocked); remove
// does not, so that a hit never waits for a rewrite.
func (s *negStore) shrink() {
	for k := range s.shards {
		sh := &s.shards[k]
		sh.mu.Lock()
		sh.shrinkLocked()
		sh.mu.Unlock()
	}
}

// remove takes out the entry of hash h if it is still the one numbered
// seq (0: whatever entry the hash has).
func (s *negStore) remove(h, seq uint64) bool {
	sh, _ := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, ok := sh.index[h]
	if !ok || seq != 0 && sh.slot(i).seq.Load() != seq {
		return false
	}
	s.freeLocked(sh, i)
	return true
}

// removeRef takes out the entry r names, if it is still there.
func (s *negStore) removeRef(r negRef) (negGone, bool) {
	sh := &s.shards[r.shard]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.slot(r.slot).seq.Load() != r.seq {
		return negGone{}, false
	}
	return s.freeLocked(sh, r.slot), true
}

// removePath takes out path's entry, if there is one.
func (s *negStore) removePath(path string) (negGone, bool) {
	h := s.hash(path)
	sh, _ := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sl, i := sh.findLocked(h, path); sl != nil {
		return s.freeLocked(sh, i), true
	}
	return negGone{}, false
}

// hasLocked reports whether path has an entry.
func (sh *negShard) hasLocked(h uint64, path string) bool {
	sl, _ := sh.findLocked(h, path)
	return sl != nil
}

// has reports whether path has an entry, whatever its root and mode.
func (s *negStore) has(path string) bool {
	h := s.hash(path)
	sh, _ := s.shardOf(h)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.hasLocked(h, path)
}

// live reports whether r still names an entry, and whether a hit marked
// it (with clear, taking the mark).
func (s *negStore) live(r negRef, clear bool) (live, used bool) {
	sh := &s.shards[r.shard]
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	if int(r.slot) >= len(sh.chunks)*negChunk {
		return false, false
	}
	sl := sh.slot(r.slot)
	if sl.seq.Load() != r.seq {
		return false, false
	}
	if clear {
		return true, sl.used.Swap(false)
	}
	return true, false
}

// removeWhere takes out and returns every entry drop says so of,
// shrinking the shards it took many from.
func (s *negStore) removeWhere(drop func(sl *negSlot, path []byte) bool) []negGone {
	var gone []negGone
	for k := range s.shards {
		sh := &s.shards[k]
		sh.mu.Lock()
		had := len(gone)
		for _, i := range sh.index {
			if sl := sh.slot(i); drop(sl, sh.pathOf(sl)) {
				gone = append(gone, s.freeLocked(sh, i))
			}
		}
		if len(gone) > had {
			sh.shrinkLocked()
		}
		sh.mu.Unlock()
	}
	return gone
}

// removeBelow takes out path's entry and, with subtree, every entry
// whose path starts with prefix.
func (s *negStore) removeBelow(path, prefix string, subtree bool) []negGone {
	var gone []negGone
	if g, ok := s.removePath(path); ok {
		gone = append(gone, g)
	}
	if subtree {
		pre := []byte(prefix)
		gone = append(gone, s.removeWhere(func(_ *negSlot, p []byte) bool { return bytes.HasPrefix(p, pre) })...)
	}
	return gone
}

// len is the number of entries.
func (s *negStore) len() int {
	n := 0
	for k := range s.shards {
		sh := &s.shards[k]
		sh.mu.RLock()
		n += len(sh.index)
		sh.mu.RUnlock()
	}
	return n
}
