package statacc

// ShedCount is how many lookups found the fd table full (EMFILE, ENFILE)
// and made room by closing idle descriptors: one atomic load, for those
// that must back off when descriptors run short (a warm-up), where
// Snapshot walks the map.
func (c *Cache) ShedCount() int64 { return c.counts[Shed].Load() }
