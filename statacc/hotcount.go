package statacc

import (
	"github.com/flashserve/caddy-flash-serve/internal/hotset"
)

// The hot set's counting, snapshots and file live in internal/hotset; a
// cache holds one hotset.Counter, and each regular file's entry a
// hotset.Tally that a hit adds to.

// HotSet is the counter of this cache's requests, for the saver of its
// hot set.
func (c *Cache) HotSet() *hotset.Counter { return c.hot }

// hotFiles yields the regular files the cache holds, with their tallies:
// the live candidates of a hot-set snapshot.
func (c *Cache) hotFiles(yield func(hotset.File, *hotset.Tally) bool) {
	c.entries.Range(func(e *meta) bool {
		if !e.fileMode.IsRegular() {
			return true
		}
		return yield(hotset.File{Path: e.path, Size: e.size}, &e.hot)
	})
}
