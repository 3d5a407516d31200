//go:build linux && !flashserve_portable

package statacc

import "hash/maphash"

// nameIndex is a directory node's index of its cached entries by name
// (entryKey of the node and the entry's path), used under the watcher's
// lock: a pointer slot an entry in an open-addressed table, at most three
// quarters full (about 14 B an entry, where a map[string]*meta took about
// 40), since the name is read from the entry's own path.
type nameIndex struct {
	slots []*meta // nil or a power of two long
	n     int
}

var nameSeed = maphash.MakeSeed()

func (x *nameIndex) len() int { return x.n }

// find returns the slot of name, or the empty slot that ends its probe.
func (x *nameIndex) find(d *dirNode, name string) (int, bool) {
	mask := len(x.slots) - 1
	for i := int(maphash.String(nameSeed, name)) & mask; ; i = (i + 1) & mask {
		m := x.slots[i]
		if m == nil {
			return i, false
		}
		if entryKey(d, m.path) == name {
			return i, true
		}
	}
}

// get returns the entry named name, nil if none.
func (x *nameIndex) get(d *dirNode, name string) *meta {
	if x.n == 0 {
		return nil
	}
	if i, ok := x.find(d, name); ok {
		return x.slots[i]
	}
	return nil
}

// put indexes m under name, in place of the entry that had it.
func (x *nameIndex) put(d *dirNode, name string, m *meta) {
	if (x.n+1)*4 > len(x.slots)*3 {
		x.resize(d, x.n+1)
	}
	i, ok := x.find(d, name)
	if !ok {
		x.n++
	}
	x.slots[i] = m
}

// remove unindexes name. The entries after it in its run move back
// (backward-shift deletion), so that no probe stops short of them.
func (x *nameIndex) remove(d *dirNode, name string) {
	if x.n == 0 {
		return
	}
	i, ok := x.find(d, name)
	if !ok {
		return
	}
	mask := len(x.slots) - 1
	for j := (i + 1) & mask; x.slots[j] != nil; j = (j + 1) & mask {
		home := int(maphash.String(nameSeed, entryKey(d, x.slots[j].path))) & mask
		// j's entry may fill the hole at i if its home is not in (i, j].
		if (j-home)&mask >= (j-i)&mask {
			x.slots[i] = x.slots[j]
			i = j
		}
	}
	x.slots[i] = nil
	x.n--
	if x.n == 0 {
		x.slots = nil
	} else if len(x.slots) > 8 && x.n*8 < len(x.slots) {
		x.resize(d, x.n)
	}
}

// resize rehashes into room for twice n.
func (x *nameIndex) resize(d *dirNode, n int) {
	size := 8
	for size < 2*n {
		size *= 2
	}
	old := x.slots
	x.slots = make([]*meta, size)
	for _, m := range old {
		if m != nil {
			i, _ := x.find(d, entryKey(d, m.path))
			x.slots[i] = m
		}
	}
}

// each calls f for every entry.
func (x *nameIndex) each(f func(*meta)) {
	for _, m := range x.slots {
		if m != nil {
			f(m)
		}
	}
}
