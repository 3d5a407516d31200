package flashserve

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/flashserve/caddy-flash-serve/prewarm"
)

// TestPrewarmReloadLeavesNoGoroutine provisions handlers with a large
// warm-up and unloads them at once, as a reload does: every goroutine of
// theirs must be gone.
func TestPrewarmReloadLeavesNoGoroutine(t *testing.T) {
	root := t.TempDir()
	for i := range 200 {
		os.WriteFile(filepath.Join(root, fmt.Sprintf("f%03d.bin", i)), []byte(strings.Repeat("x", 256<<10)), 0o644)
	}
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	runtime.GC()
	before := runtime.NumGoroutine()
	for range 20 {
		ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
		fsrv := &FlashServe{Root: root, Prewarm: []string{"*"}, PrewarmBudget: 1 << 40}
		if err := fsrv.Provision(ctx); err != nil {
			t.Fatal(err)
		}
		fsrv.logger = zap.NewNop()
		cancel() // the config is unloaded
		if err := fsrv.Cleanup(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCorruptHotSetDoesNotFailStart checks that a torn hot-set file is
// ignored with a warning and the handler still starts and warms.
func TestCorruptHotSetDoesNotFailStart(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "a.bin"), []byte("hello"), 0o644)
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	fsrv := &FlashServe{Root: root, Prewarm: []string{"*"}, StatWorkers: 3}
	// The hot set of these cache settings, torn.
	probe := &FlashServe{StatWorkers: 3}
	probe.provisionCacheKeyOnly()
	path := hotSetPath(probe.cacheKey)
	os.MkdirAll(filepath.Dir(path), 0o700)
	os.WriteFile(path, []byte(`{"version":1,"files":[{"path":"/x`), 0o600)
	if err := fsrv.Provision(ctx); err != nil {
		t.Fatalf("a corrupt hot set failed the start: %v", err)
	}
	defer fsrv.Cleanup()
	if _, err := prewarm.LoadHotSet(path); err == nil {
		t.Fatal("the test did not corrupt the hot set")
	}
}

// TestHotSetSurvivesRestart serves some files, unloads the handler (which
// saves the hot set), drops the files from the page cache, and starts a
// new handler: the hot files must come back into the page cache by
// themselves.
func TestHotSetSurvivesRestart(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("residency is Linux's here")
	}
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
			t.Skip("the page cache keeps the files after DONTNEED here")
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
