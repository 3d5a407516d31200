package statacc

// wordTable is an open-addressed table of nonzero words placed by their
// high 32 bits (wordHome): linear probing, at most three quarters full,
// backward-shift deletion, so that no tombstone is left and a probe stops
// at the first empty word. It holds no pointer: a table of a million words
// is nothing for the collector to mark, and takes 8 B a word where a
// map[uint64]uint64 took about 32 B an entry. The negative store indexes
// its slots with one (a tag of the path's hash and the slot number), a
// directory node its negative entries (their negRef).
type wordTable struct {
	words []uint64 // nil or a power of two long
	n     int
}

// wordTableMin is the length of a table's first allocation.
const wordTableMin = 8

// wordHome is where the probe of a word whose high half is key starts in
// a table of size words (a power of two): key multiplied by 2^32/φ and its
// top bits taken (Fibonacci hashing), so that keys alike in their low bits
// (one shard's slot numbers, in a directory's negRefs) spread over the
// table.
func wordHome(key uint32, size int) int { return int(uint64(key*0x9E3779B9) * uint64(size) >> 32) }

func (t *wordTable) len() int { return t.n }

// add puts w, which the table does not hold, in the table.
func (t *wordTable) add(w uint64) {
	if (t.n+1)*4 > len(t.words)*3 {
		t.resize(max(wordTableMin, 2*len(t.words)))
	}
	t.place(w)
	t.n++
}

func (t *wordTable) place(w uint64) {
	mask := len(t.words) - 1
	for i := wordHome(uint32(w>>32), len(t.words)); ; i = (i + 1) & mask {
		if t.words[i] == 0 {
			t.words[i] = w
			return
		}
	}
}

func (t *wordTable) resize(size int) {
	old := t.words
	t.words = make([]uint64, size)
	for _, w := range old {
		if w != 0 {
			t.place(w)
		}
	}
}

// index returns the position of w, -1 if the table does not hold it.
func (t *wordTable) index(w uint64) int {
	if t.n == 0 {
		return -1
	}
	mask := len(t.words) - 1
	for i := wordHome(uint32(w>>32), len(t.words)); ; i = (i + 1) & mask {
		switch t.words[i] {
		case w:
			return i
		case 0:
			return -1
		}
	}
}

// remove takes w out, reporting whether the table held it.
func (t *wordTable) remove(w uint64) bool {
	i := t.index(w)
	if i < 0 {
		return false
	}
	t.removeAt(i)
	return true
}

// removeAt empties position i. The words after it in its run move back,
// each to the hole if its home is not between the hole and it, so that
// no probe stops short of them. An emptied table gives its words back.
func (t *wordTable) removeAt(i int) {
	mask := len(t.words) - 1
	for j := (i + 1) & mask; t.words[j] != 0; j = (j + 1) & mask {
		home := wordHome(uint32(t.words[j]>>32), len(t.words))
		if (j-home)&mask >= (j-i)&mask {
			t.words[i] = t.words[j]
			i = j
		}
	}
	t.words[i] = 0
	if t.n--; t.n == 0 {
		t.words = nil
	}
}

// shrink gives back the room of a table at most an eighth full (a table
// keeps its peak's otherwise), leaving it at most half full.
func (t *wordTable) shrink() {
	if len(t.words) <= wordTableMin || t.n*8 > len(t.words) {
		return
	}
	size := wordTableMin
	for size < 2*t.n {
		size *= 2
	}
	t.resize(size)
}
