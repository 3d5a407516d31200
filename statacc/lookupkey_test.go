package statacc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestSharedCacheKeepsEachConfinement looks the same paths up under nested
// roots and different symlinks modes in one cache, all at once on a cold
// cache and then again from its entries: every lookup gets the answer of
// its own root and mode, never one merged in flight or cached for another.
func TestSharedCacheKeepsEachConfinement(t *testing.T) {
	base := t.TempDir()
	outer := filepath.Join(base, "outer")
	inner := filepath.Join(outer, "inner")
	if err := os.MkdirAll(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	const rounds = 40
	for i := range rounds {
		// up-i leaves inner but stays in outer; in-i stays in inner.
		if err := os.WriteFile(filepath.Join(outer, fmt.Sprintf("o%d.txt", i)), []byte("outer"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(inner, fmt.Sprintf("i%d.txt", i)), []byte("inner"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(fmt.Sprintf("../o%d.txt", i), filepath.Join(inner, fmt.Sprintf("up%d", i))); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(fmt.Sprintf("i%d.txt", i), filepath.Join(inner, fmt.Sprintf("in%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	type lookup struct {
		root string
		mode Symlinks
		link string // up or in
		want error  // nil: the target's bytes, below
		body string
	}
	lookups := []lookup{
		{outer, SymlinksBeneath, "up", nil, "outer"},
		{inner, SymlinksBeneath, "up", errEscape, ""},
		{outer, SymlinksDeny, "up", errSymlink, ""},
		{inner, SymlinksFollow, "up", nil, "outer"},
		{inner, SymlinksBeneath, "in", nil, "inner"},
		{inner, SymlinksDeny, "in", errSymlink, ""},
		{outer, SymlinksDeny, "in", errSymlink, ""},
		{outer, SymlinksFollow, "in", nil, "inner"},
	}
	c := New(Options{Workers: 4})
	defer c.Close()
	check := func(l lookup, path string, phase string) error {
		e, err := c.getConfined(context.Background(), l.root, l.mode, path)
		if l.want != nil {
			if !errors.Is(err, l.want) {
				return fmt.Errorf("%s: %s under %s (%v): error %v, want %v", phase, path, l.root, l.mode, err, l.want)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %s under %s (%v): %v, want the file", phase, path, l.root, l.mode, err)
		}
		defer e.Release()
		b, err := e.ReadAll()
		if err != nil || string(b) != l.body {
			return fmt.Errorf("%s: %s under %s (%v): %q, %v; want %q", phase, path, l.root, l.mode, b, err, l.body)
		}
		return nil
	}
	const perLookup = 4
	for i := range rounds {
		for _, phase := range []string{"cold", "cached"} {
			start := make(chan struct{})
			errs := make(chan error, len(lookups)*perLookup)
			var wg sync.WaitGroup
			for _, l := range lookups {
				path := filepath.Join(inner, fmt.Sprintf("%s%d", l.link, i))
				for range perLookup {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						errs <- check(l, path, phase)
					}()
				}
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
		}
	}
	t.Logf("misses %d, merged %d, hits %d, negative hits %d", c.counts[Misses].Load(), c.counts[Merged].Load(), c.counts[Hits].Load(), c.counts[NegativeHits].Load())
	if c.counts[Merged].Load() == 0 {
		t.Log("no lookup was merged in flight this run: the merges were not exercised")
	}
}
