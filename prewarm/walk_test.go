package prewarm

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestWalkTakesTurnsWhileBusy: a Background warm-up's walk of its paths
// (Warmer.Expand) stats walkTurn files per turn while requests are
// served, each turn followed by a pause of backgroundPause times the CPU
// it took, and walks at once, with no pause and no CPU clock read, when
// none is served; either way it finds what Expand finds. The CPU clock is
// the test's: each reading advances it by 1 ms, so that each turn "takes"
// 1 ms.
func TestWalkTakesTurnsWhileBusy(t *testing.T) {
	const files = 3*walkTurn + 5
	targets := smallTargets(t, files)
	dir := filepath.Dir(targets[0].Path)
	want, err := Expand(dir, []string{"*"})
	if err != nil || len(want) != files {
		t.Fatalf("Expand: %d files, %v; want %d", len(want), err, files)
	}
	for _, busy := range []bool{true, false} {
		var mu sync.Mutex
		var clock time.Duration
		var reads int
		var pauses []time.Duration
		w := &Warmer{Busy: func() bool { return busy }, Background: true}
		w.cpu = func() time.Duration {
			mu.Lock()
			defer mu.Unlock()
			reads++
			clock += time.Millisecond
			return clock
		}
		w.pause = func(_ context.Context, d time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			pauses = append(pauses, d)
		}
		got, err := w.Expand(context.Background(), dir, []string{"*"})
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("busy %v: Expand found %d files, %v; want the %d Expand finds", busy, len(got), err, len(want))
		}
		mu.Lock()
		t.Logf("busy %v: %d pauses %v, CPU clock read %d times", busy, len(pauses), pauses, reads)
		if busy {
			turns := (files + walkTurn - 1) / walkTurn
			if len(pauses) != turns {
				t.Errorf("busy: %d pauses for %d files, want one per %d files: %d", len(pauses), files, walkTurn, turns)
			}
			for i, d := range pauses {
				if d != backgroundPause*time.Millisecond {
					t.Errorf("busy: pause %d is %v, want %d × the 1 ms the turn took", i, d, backgroundPause)
				}
			}
		} else if len(pauses) != 0 || reads != 0 {
			t.Errorf("idle: %d pauses, CPU clock read %d times; want none", len(pauses), reads)
		}
		mu.Unlock()
	}
}

// TestWalkStopsWithItsContext: a walk that takes turns ends when its
// context does, within the turn it is in, with the context's error.
func TestWalkStopsWithItsContext(t *testing.T) {
	targets := smallTargets(t, 4*walkTurn)
	dir := filepath.Dir(targets[0].Path)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pauses := 0
	w := &Warmer{Busy: func() bool { return true }, Background: true}
	w.cpu = func() time.Duration { return 0 }
	w.pause = func(context.Context, time.Duration) {
		pauses++
		cancel()
	}
	got, err := w.Expand(ctx, dir, []string{"*"})
	if !errors.Is(err, context.Canceled) || got != nil || pauses != 1 {
		t.Fatalf("walk cancelled in its first pause: %d files, %v, %d pauses; want none, context.Canceled, 1", len(got), err, pauses)
	}
}
