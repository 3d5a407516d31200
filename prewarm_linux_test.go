//go:build linux && !flashserve_portable

package flashserve

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/flashserve/caddy-flash-serve/prewarm"
)

// TestHotSetSurvivesRestart serves some files, unloads the handler (which
// saves the hot set), drops the files from the page cache, and starts a
// new handler: the hot files must come back into the page cache by
// themselves.
func TestHotSetSurvivesRestart(t *testing.T) {
	root := t.TempDir()
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	var hot []string
	for i := range 6 {
		p := filepath.Join(root, fmt.Sprintf("hot%d.bin", i))
		f, _ := os.Create(p)
		f.Write([]byte(strings.Repeat("h", 64<<10)))
		f.Sync()
		f.Close()
		hot = append(hot, p)
	}
	start := func() *FlashServe {
		ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
		t.Cleanup(cancel)
		// A pattern that matches nothing: only the hot set is warmed.
		fsrv := &FlashServe{Root: root, Prewarm: []string{"none-*"}, StatWorkers: 5}
		if err := fsrv.Provision(ctx); err != nil {
			t.Fatal(err)
		}
		return fsrv
	}
	a := start()
	for round := range 3 {
		for i, p := range hot {
			if i%2 == 1 && round > 0 {
				continue // the odd files are less hot, but still in the set
			}
			e, err := a.cache.Get(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			e.Release()
		}
	}
	if err := a.Cleanup(); err != nil { // the last user: the hot set is saved
		t.Fatal(err)
	}
	hs, err := prewarm.LoadHotSet(hotSetPath(a.cacheKey))
	if err != nil || len(hs.Files) != len(hot) {
		t.Fatalf("saved hot set: %+v, %v", hs, err)
	}
	if hs.Files[0].Hits < hs.Files[len(hs.Files)-1].Hits {
		t.Fatalf("hot set not ordered by hits: %+v", hs.Files)
	}
	for _, p := range hot {
		if err := prewarm.Evict(p); err != nil {
			t.Fatal(err)
		}
		if r, _ := prewarm.FileResidency(p); r.Resident > 0 {
			t.Fatal("the page cache keeps the files after DONTNEED: the test would prove nothing")
		}
	}
	b := start()
	defer b.Cleanup()
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range hot {
		for {
			r, err := prewarm.FileResidency(p)
			if err != nil {
				t.Fatal(err)
			}
			if r.Percent() == 100 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s is %.0f%% resident after the restart", p, r.Percent())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
