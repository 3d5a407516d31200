package statacc

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// pathMap maps a filesystem path to its published meta: the cache's index
// of the paths that exist. A Load takes no lock and allocates nothing;
// writers take one shard's lock.
//
// Why not sync.Map: it cost about 120 B per entry (a trie node's share, an
// entry node, the key boxed in an interface; TestHeapPerEntry's file entry
// went from 504 B to 405 B), kept its trie nodes after the entries left,
// and a lookup walked four or five trie levels, a cache miss each, on a
// tree of a million files (BenchmarkPathMapLoad: 240 ns here, 610 ns with
// sync.Map). Here an entry is a pointer slot and a tag byte in an
// open-addressed table (linear probing, at most three quarters full, so
// about 15 B an entry), and a lookup reads one word of tags, one slot and
// the meta it finds.
//
// A table is grown or shrunk by copying it, under its shard's lock, and
// publishing the copy: a Load that still reads the old one sees the map as
// it was a moment before, as if it had come first. A slot goes from empty
// to used to deleted and back to used, never back to empty, so that a
// probe never stops short of a path that is in the table.
type pathMap struct {
	seed   maphash.Seed
	tables [pathShards]atomic.Pointer[pathTable]
	locks  [pathShards]pathShardLock
}

const (
	pathShards    = 64 // by the hash's top 6 bits
	pathShardBits = 6
	pathTableMin  = 8 // slots: one word of tags
)

// pathShardLock guards one shard's table; its own cache line, so that the
// writers of one shard do not slow down those of its neighbours.
type pathShardLock struct {
	mu sync.Mutex
	// live counts the used slots of the shard's table, dead the deleted.
	live, dead int
	_          [40]byte
}

// pathTable is one shard's table: slots and, a byte each, their tags.
type pathTable struct {
	mask  uint64 // len(slots) - 1, a power of two less one
	slots []atomic.Pointer[meta]
	// tags holds a byte per slot, eight to a word, read as a word: 0 for an
	// empty slot, tagDeleted for a deleted one, else tagUsed and seven bits
	// of the path's hash, so that a probe reads the meta only where the
	// tag matches (one in 128 of the others).
	tags []atomic.Uint64
}

const (
	tagDeleted = 1
	tagUsed    = 0x80
)

func newPathTable(n int) *pathTable {
	return &pathTable{mask: uint64(n - 1), slots: make([]atomic.Pointer[meta], n), tags: make([]atomic.Uint64, n/8)}
}

// hash gives the shard (top bits), the tag (the seven below them) and the
// first slot (the low bits).
func (pm *pathMap) hash(path string) (h uint64, shard int, tag uint8) {
	h = maphash.String(pm.seed, path)
	return h, int(h >> (64 - pathShardBits)), tagUsed | uint8(h>>(64-pathShardBits-7))&0x7f
}

func (t *pathTable) tag(i uint64) uint8 { return uint8(t.tags[i/8].Load() >> (i % 8 * 8)) }

// setTag is for the shard's writer, under its lock.
func (t *pathTable) setTag(i uint64, tag uint8) {
	w := &t.tags[i/8]
	shift := i % 8 * 8
	w.Store(w.Load()&^(0xff<<shift) | uint64(tag)<<shift)
}

// Load returns the meta of path, nil if none.
func (pm *pathMap) Load(path string) *meta {
	h, shard, tag := pm.hash(path)
	t := pm.tables[shard].Load()
	if t == nil {
		return nil
	}
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		switch t.tag(i) {
		case 0:
			return nil
		case tag:
			if m := t.slots[i].Load(); m != nil && m.path == path {
				return m
			}
		}
	}
}

// find returns the slot of path in t, or where it would go (the first
// deleted slot on its way, else the empty one that ended it) and false.
// The shard's lock held.
func (t *pathTable) find(path string, h uint64, tag uint8) (uint64, bool) {
	free, hasFree := uint64(0), false
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		switch got := t.tag(i); got {
		case 0:
			if hasFree {
				return free, false
			}
			return i, false
		case tagDeleted:
			if !hasFree {
				free, hasFree = i, true
			}
		case tag:
			if t.slots[i].Load().path == path {
				return i, true
			}
		}
	}
}

// Swap publishes m under its path and returns the meta it replaced, if any.
func (pm *pathMap) Swap(m *meta) (old *meta, replaced bool) {
	h, shard, tag := pm.hash(m.path)
	l := &pm.locks[shard]
	l.mu.Lock()
	defer l.mu.Unlock()
	t := pm.tables[shard].Load()
	if t == nil {
		t = newPathTable(pathTableMin)
		pm.tables[shard].Store(t)
	}
	i, found := t.find(m.path, h, tag)
	if found {
		return t.slots[i].Swap(m), true
	}
	if (l.live+l.dead+1)*4 > len(t.slots)*3 {
		t = pm.resizeLocked(shard, l.live+1)
		i, _ = t.find(m.path, h, tag)
	}
	if t.tag(i) == tagDeleted {
		l.dead--
	}
	l.live++
	// The slot before its tag: a Load that sees the tag finds the meta.
	t.slots[i].Store(m)
	t.setTag(i, tag)
	return nil, false
}

// LoadAndDelete removes path's meta and returns it, nil if none.
func (pm *pathMap) LoadAndDelete(path string) *meta { return pm.delete(path, nil) }

// CompareAndDelete removes m if it is still its path's meta, and reports
// whether it did.
func (pm *pathMap) CompareAndDelete(m *meta) bool { return pm.delete(m.path, m) != nil }

// delete removes path's meta if it is only (any meta if only is nil), and
// returns what it removed.
func (pm *pathMap) delete(path string, only *meta) *meta {
	h, shard, tag := pm.hash(path)
	l := &pm.locks[shard]
	l.mu.Lock()
	defer l.mu.Unlock()
	t := pm.tables[shard].Load()
	if t == nil {
		return nil
	}
	i, found := t.find(path, h, tag)
	if !found || only != nil && t.slots[i].Load() != only {
		return nil
	}
	return pm.deleteLocked(shard, t, i)
}

// deleteLocked empties slot i of shard's table t, and shrinks the table
// once it is less than an eighth full, so that a purge gives its room back.
func (pm *pathMap) deleteLocked(shard int, t *pathTable, i uint64) *meta {
	l := &pm.locks[shard]
	t.setTag(i, tagDeleted)
	m := t.slots[i].Swap(nil)
	l.live--
	l.dead++
	if len(t.slots) > pathTableMin && l.live*8 < len(t.slots) {
		pm.resizeLocked(shard, l.live)
	}
	return m
}

// resizeLocked copies shard's live slots to a new table with room for
// twice n, and publishes it.
func (pm *pathMap) resizeLocked(shard int, n int) *pathTable {
	size := pathTableMin
	for size < 2*n {
		size *= 2
	}
	old := pm.tables[shard].Load()
	t := newPathTable(size)
	for i := range old.slots {
		m := old.slots[i].Load()
		if m == nil {
			continue
		}
		h, _, tag := pm.hash(m.path)
		j, _ := t.find(m.path, h, tag)
		t.slots[j].Store(m)
		t.setTag(j, tag)
	}
	l := &pm.locks[shard]
	l.dead = 0
	pm.tables[shard].Store(t)
	return t
}

// Range calls f for each meta, until f returns false. It sees each shard
// as it was when Range came to it: its metas are copied under the shard's
// lock and f is called without it, so that f may delete or store. Why a
// copy, not the table read in place: a path deleted and stored again
// while Range runs may land in a slot after the one Range read it from (a
// probe that wrapped around the table's end), and Range would give it to
// f twice, which sync.Map's Range never did.
func (pm *pathMap) Range(f func(*meta) bool) {
	var ms []*meta
	for s := range pm.tables {
		l := &pm.locks[s]
		l.mu.Lock()
		ms = ms[:0]
		if t := pm.tables[s].Load(); t != nil {
			for i := range t.slots {
				if m := t.slots[i].Load(); m != nil {
					ms = append(ms, m)
				}
			}
		}
		l.mu.Unlock()
		for _, m := range ms {
			if !f(m) {
				return
			}
		}
	}
}

// Len is the number of metas.
func (pm *pathMap) Len() int {
	n := 0
	for s := range pm.locks {
		l := &pm.locks[s]
		l.mu.Lock()
		n += l.live
		l.mu.Unlock()
	}
	return n
}
