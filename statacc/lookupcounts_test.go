package statacc

import (
	"context"
	"path/filepath"
	"testing"
)

// TestGetCountedCountsEachCallerApart: two callers of one cache each get
// their own hits, negative hits and misses, which add up to the cache's
// counters; getConfined counts in no caller's.
func TestGetCountedCountsEachCallerApart(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a"), "a")
	c := New(Options{Workers: 1, NoInotify: true, NegativeEntries: 100})
	defer c.Close()
	ctx := context.Background()
	var one, two LookupCounts
	get := func(counts *LookupCounts, name string) {
		t.Helper()
		e, err := c.GetCounted(ctx, counts, dir, SymlinksFollow, filepath.Join(dir, name))
		if err == nil {
			e.Release()
		}
	}
	for range 3 {
		get(&one, "a")
	}
	for range 4 {
		get(&two, "missing")
	}
	get(&two, "a")
	if e, err := c.getConfined(ctx, dir, SymlinksFollow, filepath.Join(dir, "a")); err == nil {
		e.Release()
	}
	for _, x := range []struct {
		name                       string
		counts                     *LookupCounts
		hits, negativeHits, misses int64
	}{{"one", &one, 2, 0, 1}, {"two", &two, 1, 3, 1}} {
		if h, n, m := x.counts.Hits.Load(), x.counts.NegativeHits.Load(), x.counts.Misses.Load(); h != x.hits || n != x.negativeHits || m != x.misses {
			t.Errorf("caller %s: %d hits, %d negative hits, %d misses; want %d, %d, %d", x.name, h, n, m, x.hits, x.negativeHits, x.misses)
		}
	}
	s := c.Counts()
	if s[Hits] != 4 || s[NegativeHits] != 3 || s[Misses]+s[Merged] != 2 {
		t.Errorf("the cache counted %d hits, %d negative hits, %d misses and %d merged; want 4, 3, 2 in all", s[Hits], s[NegativeHits], s[Misses], s[Merged])
	}
}
