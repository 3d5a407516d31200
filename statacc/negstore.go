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

// negStore holds the negative entries, the cached "no such file" answers,
// in memory the garbage collector does not scan: a storm of 50,000 missing
// paths kept as 50,000 *Entry (each with its path, error, root and node
// pointers) cost more CPU per request in marking than a hit costs in all
// (5.4 µs against Caddy's whole `respond 404` at 2.4 µs). Here an entry is
// a slot of a pointer-free struct, found through a map from a 64-bit hash
// of its path to its slot number (a map of plain words, which the collector
// does not scan either), with its root and path in a byte arena: a hit
// compares them with the lookup's, so that two paths with the same hash
// never answer for each other (the later one replaces the earlier, whose
// next lookup is a miss).
//
// The store is sharded by hash, each shard under its own RWMutex: a hit
// takes one shard's read lock, no lock shared by every lookup, and
// allocates nothing. Who indexes an entry elsewhere (the watcher, by the
// node of its directory; the negative clock, for eviction) names it by a
// negRef whose seq changes when the slot is freed, so that a reference to
// an entry that left the cache finds it gone.
type negStore struct {
	// hash is maphash of the path; tests replace it to force collisions.
	hash   func(path string) uint64
	seed   maphash.Seed
	seq    atomic.Uint64
	shards [negShards]negShard
	// count and dead are the cache's NegativeCount and its negative
	// clock's dead count, moved by every insertion and removal.
	count, dead *atomic.Int64
	// bytes is what the live entries' roots and paths take in the arenas
	// (Options.negativeBytes bounds it).
	bytes atomic.Int64
}

const (
	negShards = 64
	// negChunk is the slots of one allocation: slots never move, so a
	// reference to one stays valid while its shard grows.
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
	// arena holds each live slot's root and path, garbage the bytes of
	// freed ones, compacted away when they are most of it.
	arena   []byte
	garbage int
	// peak is the most entries index held since it was made: a Go map
	// keeps the room of its largest size (shrinkLocked).
	peak int
	_    [24]byte // keeps neighbouring shards' locks off one cache line
}

// negSlot is one negative entry. It holds no pointer.
type negSlot struct {
	// seq is the entry's number, unique in the cache's life; 0 while the
	// slot is free. Written under the shard's lock.
	seq  atomic.Uint64
	hash uint64
	// node is the watcher's id of the directory node the entry is indexed
	// under (0: none); mark the index of that node's LRU mark (-1: none).
	node uint64
	// checked is the nanotime of the lookup that found the path missing,
	// moved on by a revalidation in place; staleSince if its directory
	// changed while it was looked up.
	checked          atomic.Int64
	off              uint32 // root then path, in the shard's arena
	rootLen, pathLen uint32
	mark             int32
	kind             negKind
	// refusedAt says the refusal (negSymlink, negEscape) that made the
	// entry named the path (an openat2 PathError), as a hit's must.
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

// negGone is what the watcher needs to unindex an entry that left the
// store: its node, hash and seq.
type negGone struct {
	node, hash, seq uint64
}

// negKind is the error a negative entry answers with: the errors
// cacheableError accepts, one value each, so that a hit returns an error
// without allocating one (the miss that made the entry returned the
// lookup's own error, with its path).
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
// nothing of its error (the handler answers not-found errors alone), so a
// missing path takes the one value of its kind; a refusal is a 403 whose
// error is {err.message} in handle_errors and Caddy's error log, so it is
// made again as the lookup that made the entry returned it, path and all
// (one allocation, on refusals only).
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

// refusedAtPath reports whether err, a refusal of path, is the openat2
// PathError that names it (hitError).
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

// root and path return a slot's strings as the arena holds them; valid
// while the shard's lock is held.
func (sh *negShard) rootOf(sl *negSlot) []byte { return sh.arena[sl.off : sl.off+sl.rootLen] }
func (sh *negShard) pathOf(sl *negSlot) []byte {
	return sh.arena[sl.off+sl.rootLen : sl.off+sl.rootLen+sl.pathLen]
}

// findLocked returns the live slot of path, nil if none: the hash's slot,
// only if its path is path. Called with sh.mu held.
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

// insertLocked stores n under hash h, in place of what the hash's slot
// held (the same path, or another with its hash): old is that entry, for
// its unindexing. Called with sh.mu held for writing.
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

// freeLocked removes the entry of slot i. Called with sh.mu held for
// writing.
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

// compactLocked makes room for more bytes in the arena when it has none:
// it rewrites the live slots' bytes, without the garbage, into an arena
// of a quarter more than they and the new bytes take. So an arena is never
// more than 1.25 times its live bytes when it grows (nor than the smallest
// arena, negArenaMin), and the bytes copied are at most five times the
// bytes appended since the last rewrite: where append would double the
// arena while freed bytes are under half of it, an arena under steady
// churn reached 2.7 times its live bytes (see
// TestNegativeArenaHoldsPathsOnceMoreAtMost), and rewriting into twice
// the live bytes held 2.5 times the bound of a store full of long paths
// (TestLongMissingPathsStayUnderTheByteBound).
func (sh *negShard) compactLocked(more int) {
	if len(sh.arena)+more <= cap(sh.arena) {
		return
	}
	sh.rewriteArenaLocked(more)
}

// rewriteArenaLocked copies the live slots' bytes, without the garbage,
// into a new arena of a quarter more than they and more bytes take
// (negArenaMin at least). Called with sh.mu held for writing.
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

// shrinkLocked gives back the room of entries that left the shard in
// bulk (the janitor's expiry of a storm of missing paths, a purge): the
// arena, if rewriting it would at least halve it, and the index, made
// anew once it holds a quarter of its peak, since neither an arena's
// garbage nor a Go map's room is given back otherwise, and a storm of a
// million paths that expired would keep its peak's memory. The slots
// stay (references name them by number): the free ones are reused first.
// Called with sh.mu held for writing.
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

// shrink lets every shard give back the room of entries that left it
// one at a time (shrinkLocked), which remove does not, so that a hit
// never waits for a rewrite.
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
func (s *negStore) remove(h, seq uint64) (negGone, bool) {
	sh, _ := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, ok := sh.index[h]
	if !ok || seq != 0 && sh.slot(i).seq.Load() != seq {
		return negGone{}, false
	}
	return s.freeLocked(sh, i), true
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
// it since the last call with clear (its second chance, which clear
// takes).
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

// removeWhere takes out every entry for which drop, given its path, says
// so, and returns them. A shard it took many from gives back their room
// (shrinkLocked).
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
