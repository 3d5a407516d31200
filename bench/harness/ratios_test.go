//go:build linux

package main

import "testing"

// runsOf builds a result from (round, value) pairs.
func runsOf(rv ...[2]float64) *result {
	r := &result{}
	for _, x := range rv {
		r.runs = append(r.runs, measurement{round: int(x[0]), value: x[1]})
	}
	return r
}

func TestPairStatsPairsRunsOfTheSameRound(t *testing.T) {
	// b's round 2 failed (no run), a's round 4 failed: the pairs are
	// rounds 1, 3 and 5, each a's value over b's of that round, whatever
	// the order of the runs.
	res := map[string]*result{
		"a": runsOf([2]float64{1, 10}, [2]float64{2, 99}, [2]float64{5, 30}, [2]float64{3, 12}),
		"b": runsOf([2]float64{3, 8}, [2]float64{1, 20}, [2]float64{4, 7}, [2]float64{5, 10}),
	}
	p := pairStats(res, "a", "b")
	if p.n != 3 || p.lo != 0.5 || p.med != 1.5 || p.hi != 3 {
		t.Fatalf("pairStats = %+v, want n 3, lo 0.5, median 1.5, hi 3", p)
	}
	if got, want := p.cell(4), "1.50× (0.50–3.00, 3 pairs)"; got != want {
		t.Errorf("cell with a run missing = %q, want %q", got, want)
	}
	if got, want := p.cell(3), "1.50× (0.50–3.00)"; got != want {
		t.Errorf("cell = %q, want %q", got, want)
	}
	if got := pairStats(res, "a", "missing"); got.n != 0 || got.cell(3) != "–" {
		t.Errorf("pairStats against a server that did not run = %+v (%q), want none", got, got.cell(3))
	}
}
