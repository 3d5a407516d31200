package statacc

import "context"

// Get is GetConfined without confinement (symlinks follow), as most of
// these tests look paths up.
func (c *Cache) Get(ctx context.Context, path string) (*Entry, error) {
	return c.GetConfined(ctx, "", SymlinksFollow, path)
}
