package statacc

import "testing"

// flagOps is a clock's view of bare entries: an entry is gone when its
// flag says so, as fdOps reads it.
type flagOps struct{}

func (flagOps) gone(e *meta) bool  { return e.gone.Load() }
func (flagOps) used(e *meta) bool  { return e.takeMark(markEvict) }
func (flagOps) evict(e *meta) bool { return !e.gone.Swap(true) }

// clockOf is a clock of n entries in room for capacity, the first dead of
// them dropped (gone, and counted dead as Cache.drop counts them).
func clockOf(n, dead, capacity int) *clock[*meta] {
	k := &clock[*meta]{ring: make([]*meta, 0, capacity)}
	for i := range n {
		e := &meta{}
		if i < dead {
			e.gone.Store(true)
			k.dead.Add(1)
		}
		k.ring = append(k.ring, e)
	}
	return k
}

// TestTidyGivesUpASmallRingOfDeadEntries: a ring shorter than compactMin
// whose entries all left the cache (a deleted directory of a few files)
// is emptied by the batch's tidy, and gives back its room, rather than
// keeping their husks until the next arrival.
func TestTidyGivesUpASmallRingOfDeadEntries(t *testing.T) {
	for _, n := range []int{1, 10, 52, compactMin - 1} {
		k := clockOf(n, n, 2*compactMin)
		tidy(k, flagOps{}, 1000)
		if len(k.ring) != 0 || k.dead.Load() != 0 || cap(k.ring) > 2*compactMin {
			t.Errorf("%d dead entries: after tidy %d entries in room for %d, %d counted dead; want none, room at most %d", n, len(k.ring), cap(k.ring), k.dead.Load(), 2*compactMin)
		}
	}
}

// TestTidyGivesBackAnEmptyRingsRoom: a ring emptied by an earlier batch
// gives back the room above 2×compactMin at the next tidy.
func TestTidyGivesBackAnEmptyRingsRoom(t *testing.T) {
	for _, room := range []int{2*compactMin + 1, 140, 168, 4*compactMin - 1, 4 * compactMin, 1000} {
		k := &clock[*meta]{ring: make([]*meta, 0, room)}
		tidy(k, flagOps{}, 1000)
		if cap(k.ring) > 2*compactMin {
			t.Errorf("empty ring in room for %d: room %d after tidy, want at most %d", room, cap(k.ring), 2*compactMin)
		}
	}
}

// TestDroppedBeforeItsRingAddLeavesNoHusk: an entry published, then
// dropped (its directory deleted) before it reached the clock, was counted
// dead by its drop while not on the ring, and the batch's tidy ran in
// between. The tidy still empties a ring of dead entries, and the late
// ringAdd does not put the dropped entry on it.
func TestDroppedBeforeItsRingAddLeavesNoHusk(t *testing.T) {
	k := clockOf(10, 10, 2*compactMin)
	k.dead.Add(1) // the dropped entry, not on the ring yet
	tidy(k, flagOps{}, 1000)
	if len(k.ring) != 0 {
		t.Errorf("tidy left %d dead entries on the ring (%d counted dead, one of them not on it)", len(k.ring), k.dead.Load())
	}
	late := &meta{}
	late.gone.Store(true)
	ringAdd(k, flagOps{}, late, 1000)
	if len(k.ring) != 0 || k.dead.Load() != 0 {
		t.Errorf("after the dropped entry's ringAdd: %d entries on the ring, %d counted dead; want 0 and 0", len(k.ring), k.dead.Load())
	}
	live := &meta{}
	ringAdd(k, flagOps{}, live, 1000)
	if len(k.ring) != 1 || k.ring[0] != live || k.dead.Load() != 0 {
		t.Errorf("a live entry's ringAdd: %d entries on the ring, %d counted dead; want it alone and 0", len(k.ring), k.dead.Load())
	}
}

// TestTidyLeavesALiveRingAlone: a ring with no dead entry, in room that
// fits it, is not walked by tidy: its hand and its room stay, so that a
// watcher batch that removed nothing of it costs nothing.
func TestTidyLeavesALiveRingAlone(t *testing.T) {
	for _, n := range []int{1, 40, compactMin, 200} {
		k := clockOf(n, 0, 2*max(n, compactMin))
		k.hand = n / 2
		first, room := &k.ring[0], cap(k.ring)
		tidy(k, flagOps{}, 1000)
		if k.hand != n/2 || &k.ring[0] != first || cap(k.ring) != room || len(k.ring) != n {
			t.Errorf("%d live entries: tidy moved the hand to %d (was %d), the ring to room %d (was %d), %d entries", n, k.hand, n/2, cap(k.ring), room, len(k.ring))
		}
	}
}
