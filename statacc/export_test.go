package statacc

import "context"

// String returns the mode as the symlinks option spells it (subtest names).
func (s Symlinks) String() string {
	return [...]string{"follow", "deny", "beneath"}[s]
}

// getConfined is GetCounted counting no site.
func (c *Cache) getConfined(ctx context.Context, root string, mode Symlinks, path string) (*Entry, error) {
	return c.GetCounted(ctx, nil, root, mode, path)
}

// Get is getConfined without confinement (symlinks follow), as most of
// these tests look paths up.
func (c *Cache) Get(ctx context.Context, path string) (*Entry, error) {
	return c.getConfined(ctx, "", SymlinksFollow, path)
}

// negativeSlot returns path's negative entry, nil if it has none. The
// slot stays valid (slots never move), but may be reused once its entry
// leaves the cache: its gone says so.
func (c *Cache) negativeSlot(path string) *negSlot {
	s := c.negatives
	h := s.hash(path)
	sh, _ := s.shardOf(h)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	sl, _ := s.findLocked(sh, h, path)
	return sl
}

// cachedWatched reports whether path has a fresh entry, positive or
// negative, that inotify watches.
func (c *Cache) cachedWatched(path string) bool {
	if m := c.entries.Load(path); m != nil {
		return m.watched && c.fresh(m)
	}
	sl := c.negativeSlot(path)
	return sl != nil && sl.watched() && c.freshNegative(sl)
}

// indexedLocked calls f with each slot the shard's index holds, its
// number and its word's tag. sh.mu held.
func (sh *negShard) indexedLocked(f func(tag, i uint32, sl *negSlot)) {
	for _, w := range sh.index.words {
		if w != 0 {
			f(uint32(w>>32), uint32(w)-1, sh.slot(uint32(w)-1))
		}
	}
}

// liveBytesLocked is what the shard's live slots keep in its arena.
func (sh *negShard) liveBytesLocked() int {
	n := 0
	sh.indexedLocked(func(_, _ uint32, sl *negSlot) { n += int(sl.arenaLen()) })
	return n
}

// shardOfPath is the shard of path's negative entry.
func (s *negStore) shardOfPath(path string) *negShard {
	sh, _ := s.shardOf(s.hash(path))
	return sh
}
