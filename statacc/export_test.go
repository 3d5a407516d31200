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
	sl, _ := sh.findLocked(h, path)
	return sl
}

// cachedWatched reports whether path has a fresh entry, positive or
// negative, that inotify watches.
func (c *Cache) cachedWatched(path string) bool {
	if m := c.entries.Load(path); m != nil {
		return m.watched && c.fresh(m)
	}
	sl := c.negativeSlot(path)
	return sl != nil && sl.watched && c.freshNegative(sl)
}
