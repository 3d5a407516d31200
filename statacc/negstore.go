package statacc

import (
	"errors"
	"hash/maphash"
	"io/fs"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// negStore holds the negative entries in memory the garbage collector
// does not scan: a storm of missing paths kept as *Entry cost more CPU in
// marking than a hit costs in all. An entry is a 40-byte slot of a
// pointer-free struct, found through a table of words (wordTable: a
// 32-bit tag of its path's hash and its slot number), with its path in a
// byte arena that a hit compares, so that two paths with one tag or one
// hash never answer for each other (each has its entry). What a site's
// every 404 shares, its confinement root and the site's root its path
// starts with, is a number among the store's prefixes: the arena holds
// the rest of the path only.
//
// The store is sharded by hash, each shard under its own RWMutex: a hit
// takes one shard's read lock and allocates nothing. Others (the watcher,
// the negative clock) name an entry by a negRef, which holds the slot's
// generation: once the slot is freed the reference finds its entry gone.
//
// Per entry: the slot, the path below the site's root in the arena (with
// up to a quarter more for the arena's growth), about 14 B of index, the
// clock's 8 B negRef and the watcher's word for it.
type negStore struct {
	// hash is maphash of the path; tests replace it to force collisions.
	hash   func(path string) uint64
	seed   maphash.Seed
	shards [negShards]negShard
	// count and dead are the cache's NegativeEntries and its negative
	// clock's dead count.
	count, dead *atomic.Int64
	// bytes is what live roots and paths take (Options.negativeBytes),
	// each entry's root and path counted whole, as if they were its own.
	bytes atomic.Int64
	// prefixes are what entries name by number, read without a lock
	// (copied on append, under prefixesMu). At most negPrefixesMax: an
	// entry beyond them keeps its root in the arena, and its whole path.
	prefixes   atomic.Pointer[negPrefixes]
	prefixesMu sync.Mutex
}

// negPrefixes is a snapshot of the numbered prefixes, never changed once
// published: a new prefix publishes a copy. The prefixes are the cache's
// for its life (an entry names one until it leaves, and there are at most
// negPrefixesMax of them).
type negPrefixes struct {
	list []negPrefix
	ids  map[negPrefix]uint32
	// bytes is what the list's strings take (a dir equal to its root
	// shares the root's).
	bytes int
}

// negPrefix is what the entries of a site share: the root they are
// confined to ("" if none), and the site's root, which their paths
// start with ("" if they do not).
type negPrefix struct{ root, dir string }

const (
	negShards = 64
	// negChunk is the slots of one allocation: slots never move.
	negChunk = 32
	// negArenaMin is the smallest arena.
	negArenaMin = 4096
	// negSlotBits is the bits of a slot number in a negRef: a shard has
	// at most 1<<negSlotBits slots (MaxNegativeEntries is a quarter of
	// what the 64 shards can number).
	negSlotBits = 26
	// negPrefixesMax is the most prefixes the store numbers: sites' roots
	// come from the configuration, but a root with a placeholder ({host})
	// could make as many as clients ask for.
	negPrefixesMax = 1024
	// negPrefixesMaxBytes bounds the bytes of the numbered prefixes'
	// strings (256 roots of PATH_MAX).
	negPrefixesMaxBytes = 1 << 20
	// negInline marks a slot's prefixID as the length of a root kept in
	// the arena, before the whole path.
	negInline = 1 << 31
	// negPathMax is the longest path kept: far beyond PATH_MAX (4096),
	// which an open refuses past anyway.
	negPathMax = 1<<16 - 1
)

// negShard is one part of the store.
type negShard struct {
	mu sync.RWMutex
	// index holds a word per live slot: negTag(hash)<<32 | slot+1.
	index  wordTable
	chunks []*[negChunk]negSlot
	free   []uint32 // freed slot numbers
	// arena holds live slots' paths below their prefix (and the roots
	// and whole paths of those with none), and freed ones' garbage.
	arena   []byte
	garbage int
	// path is where freeLocked puts a slot's whole path to hash it: the
	// shard's, under its lock.
	path []byte
}

// negSlot is one negative entry. It holds no pointer.
type negSlot struct {
	// gen counts the slot's uses: odd while it holds an entry, even while
	// free. A negRef names the gen of the entry it was made for; it would
	// name a later entry of the slot after 2^31 reuses, which is a ring's
	// dead reference taken for live at worst (the watcher's go promptly).
	gen atomic.Uint32
	// mark is the index of the LRU mark of the entry's directory node
	// (-1: none), node that node's id (0: none).
	mark int32
	node uint64
	// checked is the nanotime of the lookup that found the path missing;
	// staleSince if its directory changed while it was looked up.
	checked atomic.Int64
	off     uint32 // its root (if kept in the arena) then its path, in the shard's arena
	// prefixID is the number of its prefix in prefixes, or negInline |
	// the length of the root kept in the arena.
	prefixID uint32
	// pathLen is the length of the path after the prefix's dir (the
	// whole path's if the root is kept in the arena): at most negPathMax.
	pathLen uint16
	// kind is the error's, with flags: negRefusedAt if the refusal that
	// made the entry named the path (an openat2 PathError), as a hit's
	// must; negWatched if inotify watches its directory.
	kind     negKind
	symlinks Symlinks
	used     atomic.Bool // the negative clock's mark
}

func (sl *negSlot) errKind() negKind { return sl.kind & negKindMask }
func (sl *negSlot) refusedAt() bool  { return sl.kind&negRefusedAt != 0 }
func (sl *negSlot) watched() bool    { return sl.kind&negWatched != 0 }

// gone reports whether the slot holds no entry.
func (sl *negSlot) gone() bool { return sl.gen.Load()&1 == 0 }

// arenaLen is what the slot keeps in the arena: a root, then its path,
// or the rest of its path after the prefix.
func (sl *negSlot) arenaLen() uint32 { return sl.inlineRootLen() + uint32(sl.pathLen) }

// inlineRootLen is the length of the root the slot keeps in the arena.
func (sl *negSlot) inlineRootLen() uint32 {
	if sl.prefixID&negInline != 0 {
		return sl.prefixID &^ negInline
	}
	return 0
}

// negRef names a negative entry from outside its shard: its shard and
// slot in the high half (which places it in a wordTable), the slot's gen
// when it was made in the low half. 0 names none (a live gen is odd).
type negRef uint64

func makeNegRef(shard, slot, gen uint32) negRef {
	return negRef(uint64(shard<<negSlotBits|slot)<<32 | uint64(gen))
}

func (r negRef) shard() uint32 { return uint32(r>>32) >> negSlotBits }
func (r negRef) slot() uint32  { return uint32(r>>32) & (1<<negSlotBits - 1) }
func (r negRef) gen() uint32   { return uint32(r) }

// negGone is an entry that left the store, for the watcher's index.
type negGone struct {
	node uint64
	ref  negRef
}

// negKind is the error a negative entry answers with, one value each, so
// that a hit allocates no error.
type negKind uint8

const (
	negNotExist negKind = iota
	negNotDir
	negSymlink
	negEscape
	negKindMask negKind = 0x3f
	// Flags of a slot's kind (negSlot.kind).
	negRefusedAt negKind = 0x80
	negWatched   negKind = 0x40
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
	s.prefixes.Store(&negPrefixes{})
	return s
}

func (s *negStore) shardOf(h uint64) (*negShard, uint32) {
	i := uint32(h>>32) % negShards
	return &s.shards[i], i
}

// negTag is the half of a hash its index word keeps, and places it by.
func negTag(h uint64) uint32 { return uint32(h>>32) ^ uint32(h) }

func (sh *negShard) slot(i uint32) *negSlot { return &sh.chunks[i/negChunk][i%negChunk] }

// restOf returns what a slot keeps of its path: the rest after its
// prefix (or the whole). sh.mu held.
func (sh *negShard) restOf(sl *negSlot) []byte {
	off := sl.off + sl.inlineRootLen()
	return sh.arena[off : off+uint32(sl.pathLen)]
}

// prefixOf is a slot's prefix; none if it keeps its root in the arena.
func (s *negStore) prefixOf(sl *negSlot) negPrefix {
	if sl.prefixID&negInline != 0 {
		return negPrefix{}
	}
	return s.prefixes.Load().list[sl.prefixID]
}

// rootIs reports whether a slot's root is root. sh.mu held.
func (s *negStore) rootIs(sh *negShard, sl *negSlot, root string) bool {
	if sl.prefixID&negInline != 0 {
		return string(sh.arena[sl.off:sl.off+sl.inlineRootLen()]) == root
	}
	return s.prefixOf(sl).root == root
}

// pathIs reports whether a slot's path is path. sh.mu held.
func (s *negStore) pathIs(sh *negShard, sl *negSlot, path string) bool {
	dir, rest := s.prefixOf(sl).dir, sh.restOf(sl)
	return len(path) == len(dir)+len(rest) && path[:len(dir)] == dir && path[len(dir):] == string(rest)
}

// pathHasPrefix reports whether a slot's path starts with pre, without
// putting it together. sh.mu held.
func (s *negStore) pathHasPrefix(sh *negShard, sl *negSlot, pre string) bool {
	dir := s.prefixOf(sl).dir
	if len(pre) <= len(dir) {
		return dir[:len(pre)] == pre
	}
	want, rest := pre[len(dir):], sh.restOf(sl)
	return pre[:len(dir)] == dir && len(rest) >= len(want) && string(rest[:len(want)]) == want
}

// appendPath appends a slot's whole path to b. sh.mu held.
func (s *negStore) appendPath(b []byte, sh *negShard, sl *negSlot) []byte {
	return append(append(b, s.prefixOf(sl).dir...), sh.restOf(sl)...)
}

// keyBytes is what bytes counts for a slot: its root's and path's length.
func (s *negStore) keyBytes(sl *negSlot) int64 {
	p := s.prefixOf(sl)
	return int64(len(p.root) + len(p.dir) + int(sl.arenaLen()))
}

// prefixID numbers the prefix of an entry of path confined to root in
// site: site's root is its dir if path starts with it. Once
// negPrefixesMax prefixes, or negPrefixesMaxBytes of them, are numbered
// (a root with a placeholder and a flood of Host values can number them
// all, for the cache's life), it gives negInline and the root's length:
// the entry keeps its root and whole path in the arena.
func (s *negStore) prefixID(root, site, path string) (id uint32, rest string) {
	p := negPrefix{root: root, dir: site}
	if !strings.HasPrefix(path, p.dir) {
		p.dir = ""
	}
	inline := negInline | uint32(len(root)) // insertLocked refuses a longer root
	ps := s.prefixes.Load()
	if i, ok := ps.ids[p]; ok {
		return i, path[len(p.dir):]
	}
	// A dir equal to its root (a site in SymlinksBeneath) shares its string.
	size := len(p.root) + len(p.dir)
	if p.dir == p.root {
		size = len(p.root)
	}
	full := func(ps *negPrefixes) bool {
		return len(ps.list) >= negPrefixesMax || ps.bytes+size > negPrefixesMaxBytes
	}
	if full(ps) {
		return inline, path
	}
	s.prefixesMu.Lock()
	defer s.prefixesMu.Unlock()
	ps = s.prefixes.Load()
	if i, ok := ps.ids[p]; ok {
		return i, path[len(p.dir):]
	}
	if full(ps) {
		return inline, path
	}
	if p.dir == p.root {
		p.root = strings.Clone(p.root)
		p.dir = p.root
	} else {
		p = negPrefix{root: strings.Clone(p.root), dir: strings.Clone(p.dir)}
	}
	next := &negPrefixes{list: append(ps.list[:len(ps.list):len(ps.list)], p), ids: make(map[negPrefix]uint32, len(ps.list)+1), bytes: ps.bytes + size}
	for i, q := range next.list {
		next.ids[q] = uint32(i)
	}
	s.prefixes.Store(next)
	return uint32(len(ps.list)), path[len(p.dir):]
}

// findLocked returns the live slot of path (whose hash is h) and its
// number, nil if none: the words of h's tag in the probe, each slot's
// path compared. sh.mu held.
func (s *negStore) findLocked(sh *negShard, h uint64, path string) (*negSlot, uint32) {
	t := &sh.index
	if t.n == 0 {
		return nil, 0
	}
	tag := negTag(h)
	mask := len(t.words) - 1
	for p := wordHome(tag, len(t.words)); ; p = (p + 1) & mask {
		w := t.words[p]
		if w == 0 {
			return nil, 0
		}
		if uint32(w>>32) == tag {
			i := uint32(w) - 1
			// A freed slot has no word (freeLocked); gone() guards the
			// hit should a word outlive its slot all the same.
			if sl := sh.slot(i); !sl.gone() && s.pathIs(sh, sl, path) {
				return sl, i
			}
		}
	}
}

// word is the index's word of slot i, whose whole path is path.
func (s *negStore) word(path []byte, i uint32) uint64 {
	// The hash reads path and keeps nothing of it.
	return uint64(negTag(s.hash(unsafe.String(unsafe.SliceData(path), len(path)))))<<32 | uint64(i) + 1
}

// negNew is a negative entry to insert.
type negNew struct {
	// site is the site's root: path's prefix, kept once for the site.
	root, site, path string
	symlinks         Symlinks
	kind             negKind
	refusedAt        bool
	watched          bool
	checked          int64
	node             uint64
	mark             int32
}

// insertLocked stores n, whose path's hash is h, in place of the path's
// entry if it has one (old, for its unindexing). sh.mu held for writing.
// ref is 0, and nothing stored, if the path is longer than negPathMax (or
// the root than 2 GiB), or the shard has no slot number or arena offset
// left.
func (s *negStore) insertLocked(sh *negShard, shard uint32, h uint64, n negNew) (ref negRef, old negGone, replaced bool) {
	if len(n.path) > negPathMax || uint64(len(n.root)) >= negInline {
		return 0, negGone{}, false
	}
	prefixID, rest := s.prefixID(n.root, n.site, n.path)
	inline := ""
	if prefixID&negInline != 0 {
		inline = n.root[:prefixID&^negInline]
	}
	if uint64(len(sh.arena)-sh.garbage)+uint64(len(inline)+len(rest)) > math.MaxUint32 {
		return 0, negGone{}, false // offsets are 32-bit: a shard's live bytes stay under 4 GiB
	}
	// Before the index changes: compaction walks the live slots.
	sh.compactLocked(len(inline) + len(rest))
	sl, i := s.findLocked(sh, h, n.path)
	if sl != nil {
		old, replaced = negGone{node: sl.node, ref: makeNegRef(shard, i, sl.gen.Load())}, true
		sh.garbage += int(sl.arenaLen())
		s.bytes.Add(-s.keyBytes(sl))
		s.dead.Add(1) // the old entry's place on the clock
		sl.gen.Add(1) // freed: the old entry's references find it gone
	} else {
		if k := len(sh.free); k > 0 {
			i = sh.free[k-1]
			sh.free = sh.free[:k-1]
		} else {
			i = uint32(len(sh.chunks) * negChunk)
			if i+negChunk > 1<<negSlotBits {
				return 0, negGone{}, false
			}
			for j := range negChunk {
				if j > 0 {
					sh.free = append(sh.free, i+uint32(negChunk-j))
				}
			}
			sh.chunks = append(sh.chunks, new([negChunk]negSlot))
		}
		sh.index.add(uint64(negTag(h))<<32 | uint64(i) + 1)
		sl = sh.slot(i)
		s.count.Add(1)
	}
	sl.off = uint32(len(sh.arena))
	sh.arena = append(append(sh.arena, inline...), rest...)
	sl.node, sl.mark = n.node, n.mark
	sl.prefixID, sl.pathLen = prefixID, uint16(len(rest))
	sl.kind, sl.symlinks = n.kind, n.symlinks
	if n.refusedAt {
		sl.kind |= negRefusedAt
	}
	if n.watched {
		sl.kind |= negWatched
	}
	sl.checked.Store(n.checked)
	sl.used.Store(false)
	s.bytes.Add(s.keyBytes(sl))
	gen := sl.gen.Add(1) // odd: live
	return makeNegRef(shard, i, gen), old, replaced
}

// freeLocked takes slot i's entry out of shard (numbered shard).
func (s *negStore) freeLocked(sh *negShard, shard, i uint32) negGone {
	sl := sh.slot(i)
	g := negGone{node: sl.node, ref: makeNegRef(shard, i, sl.gen.Load())}
	sh.path = s.appendPath(sh.path[:0], sh, sl)
	sh.index.remove(s.word(sh.path, i))
	sh.garbage += int(sl.arenaLen())
	s.bytes.Add(-s.keyBytes(sl))
	sl.gen.Add(1) // even: free
	sh.free = append(sh.free, i)
	s.count.Add(-1)
	s.dead.Add(1)
	if sh.index.len() == 0 {
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
	for _, w := range sh.index.words {
		if w == 0 {
			continue
		}
		sl := sh.slot(uint32(w) - 1)
		n := sl.arenaLen()
		off := uint32(len(arena))
		arena = append(arena, sh.arena[sl.off:sl.off+n]...)
		sl.off = off
	}
	sh.arena, sh.garbage = arena, 0
}

// shrinkLocked gives back the room of entries that left in bulk: the
// arena, if rewriting would halve it, and the index, if at most an eighth
// full. Slots stay: free ones are reused first.
func (sh *negShard) shrinkLocked() {
	if live := len(sh.arena) - sh.garbage; cap(sh.arena) >= 2*max(2*live, negArenaMin) {
		sh.rewriteArenaLocked(0)
	}
	sh.index.shrink()
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

// refLocked returns the slot r names if it still holds r's entry.
func (sh *negShard) refLocked(r negRef) *negSlot {
	if r.gen()&1 == 0 || int(r.slot()) >= len(sh.chunks)*negChunk {
		return nil
	}
	if sl := sh.slot(r.slot()); sl.gen.Load() == r.gen() {
		return sl
	}
	return nil
}

// removeRef takes out the entry r names, if it is still there.
func (s *negStore) removeRef(r negRef) (negGone, bool) {
	sh := &s.shards[r.shard()]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.refLocked(r) == nil {
		return negGone{}, false
	}
	return s.freeLocked(sh, r.shard(), r.slot()), true
}

// removePath takes out path's entry, if there is one.
func (s *negStore) removePath(path string) (negGone, bool) {
	h := s.hash(path)
	sh, shard := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sl, i := s.findLocked(sh, h, path); sl != nil {
		return s.freeLocked(sh, shard, i), true
	}
	return negGone{}, false
}

// has reports whether path has an entry, whatever its root and mode.
func (s *negStore) has(path string) bool {
	h := s.hash(path)
	sh, _ := s.shardOf(h)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	sl, _ := s.findLocked(sh, h, path)
	return sl != nil
}

// live reports whether r still names an entry, and whether a hit marked
// it (with clear, taking the mark).
func (s *negStore) live(r negRef, clear bool) (live, used bool) {
	sh := &s.shards[r.shard()]
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	sl := sh.refLocked(r)
	if sl == nil {
		return false, false
	}
	if clear {
		return true, sl.used.Swap(false)
	}
	return true, false
}

// removeWhere takes out and returns every entry drop says so of (drop is
// called under the slot's shard's lock), shrinking the shards it took many
// from.
func (s *negStore) removeWhere(drop func(sh *negShard, sl *negSlot) bool) []negGone {
	var gone []negGone
	for k := range s.shards {
		sh := &s.shards[k]
		sh.mu.Lock()
		had := len(gone)
		// By slot, not by index word: freeing moves the index's words.
		for c, chunk := range sh.chunks {
			for j := range chunk {
				if sl := &chunk[j]; !sl.gone() && drop(sh, sl) {
					gone = append(gone, s.freeLocked(sh, uint32(k), uint32(c*negChunk+j)))
				}
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
		gone = append(gone, s.removeWhere(func(sh *negShard, sl *negSlot) bool { return s.pathHasPrefix(sh, sl, prefix) })...)
	}
	return gone
}

// len is the number of entries.
func (s *negStore) len() int {
	n := 0
	for k := range s.shards {
		sh := &s.shards[k]
		sh.mu.RLock()
		n += sh.index.len()
		sh.mu.RUnlock()
	}
	return n
}
