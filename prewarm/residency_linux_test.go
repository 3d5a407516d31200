//go:build linux && !flashserve_portable

package prewarm

import (
	"context"
	"path/filepath"
	"testing"
)

func TestWarmRestoresResidencyWithinBudget(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.bin")
	second := filepath.Join(dir, "second.bin")
	writeSynced(t, big, 4<<20)
	writeSynced(t, second, 1<<20)
	for _, p := range []string{big, second} {
		if err := Evict(p); err != nil {
			t.Fatal(err)
		}
		r, err := FileResidency(p)
		if err != nil {
			t.Fatal(err)
		}
		if r.Resident > r.Size/10 {
			t.Fatalf("the page cache keeps %s after DONTNEED (%d of %d bytes): the test would prove nothing", p, r.Resident, r.Size)
		}
	}
	// A budget of 300 pages and a bit: the first file is warmed up to the
	// last whole page that fits, and the second not at all.
	budget := 300*pageSize + pageSize/2
	w := &Warmer{Budget: budget, Workers: 2}
	p, err := w.Run(context.Background(), []Target{{Path: big, Size: 4 << 20}, {Path: second, Size: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	r1, _ := FileResidency(big)
	r2, _ := FileResidency(second)
	if r1.Resident != 300*pageSize {
		t.Fatalf("first file: %d bytes resident, want exactly %d (300 pages)", r1.Resident, 300*pageSize)
	}
	if r2.Resident != 0 {
		t.Fatalf("second file: %d bytes resident, but the budget was spent", r2.Resident)
	}
	if p.Bytes != 300*pageSize || p.Files != 1 {
		t.Fatalf("progress %+v", p)
	}
	// Without a budget, everything comes back.
	if _, err := (&Warmer{}).Run(context.Background(), []Target{{Path: big, Size: 4 << 20}, {Path: second, Size: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{big, second} {
		if r, _ := FileResidency(path); r.Percent() != 100 {
			t.Fatalf("%s: %.1f%% resident after an unlimited warm-up", path, r.Percent())
		}
	}
}
