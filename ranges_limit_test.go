package flashserve

import (
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// manyRanges is a Range header of n one-byte ranges, each satisfiable.
func manyRanges(n int) string {
	var b strings.Builder
	b.WriteString("bytes=")
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		s := strconv.Itoa(2 * i)
		b.WriteString(s)
		b.WriteByte('-')
		b.WriteString(s)
	}
	return b.String()
}

// allocatedBytes is what f allocates on the heap, on average over runs.
func allocatedBytes(runs int, f func()) float64 {
	f()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64(after.TotalAlloc-before.TotalAlloc) / float64(runs)
}

// TestParseRangeStopsAtMaxRanges: a header of 100,000 ranges keeps only
// max_ranges+1 of them (enough to be refused as too many) and allocates
// about as little as a header of a few, where collecting them all would
// take megabytes; the ranges past the bound are still checked for syntax.
func TestParseRangeStopsAtMaxRanges(t *testing.T) {
	const n, size = 100_000, 1 << 30
	header := manyRanges(n)
	keep := defaultMaxRanges + 1
	got, err := parseRangeAtMost(header, size, nil, keep)
	if err != nil || len(got) != keep {
		t.Fatalf("%d ranges kept, %v; want %d", len(got), err, keep)
	}
	if _, ok := limitRanges(got, size, defaultMaxRanges); ok {
		t.Error("the kept ranges were not refused as too many")
	}
	// The ranges past the bound are parsed: a syntax error there is one.
	if _, err := parseRangeAtMost(header+",x-1", size, nil, keep); !errors.Is(err, errInvalidRange) {
		t.Errorf("a bad range after the bound: %v, want errInvalidRange", err)
	}
	// Below the bound nothing changes.
	few := manyRanges(3)
	all, _ := parseRange(few, size, nil)
	bounded, _ := parseRangeAtMost(few, size, nil, keep)
	if len(all) != 3 || len(bounded) != 3 || all[2] != bounded[2] {
		t.Errorf("3 ranges: %v unbounded, %v bounded", all, bounded)
	}

	var buf [4]byteRange
	bounded100k := allocatedBytes(20, func() { parseRangeAtMost(header, size, buf[:0], keep) })
	unbounded100k := allocatedBytes(5, func() { parseRange(header, size, buf[:0]) })
	allocs := testing.AllocsPerRun(20, func() { parseRangeAtMost(header, size, buf[:0], keep) })
	t.Logf("100,000 ranges: %.0f B and %.0f allocations per parse kept to %d ranges; %.0f B when all are kept",
		bounded100k, allocs, keep, unbounded100k)
	// Generous bounds: keep ranges of 16 bytes each would need well under
	// 4 KiB; all 100,000 need about 1.6 MB.
	if bounded100k > 8<<10 || allocs > 16 {
		t.Errorf("a 100,000-range header allocated %.0f B in %.0f allocations; want at most 8 KiB in 16", bounded100k, allocs)
	}
	if unbounded100k < 1<<20 {
		t.Errorf("collecting all 100,000 ranges allocated only %.0f B: the measure does not see the slice", unbounded100k)
	}
}
