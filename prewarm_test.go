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

	"github.com/flashserve/caddy-flash-serve/internal/hotset"
	"github.com/flashserve/caddy-flash-serve/statacc"
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
	if _, err := hotset.Load(path); err == nil {
		t.Fatal("the test did not corrupt the hot set")
	}
}

// TestHotSetSurvivesReload: a reload provisions the new handler before it
// cleans up the old one, so they share the cache and its hot-set saver;
// the counts taken before the reload are in the set saved when the last
// handler goes, beside those taken after it.
func TestHotSetSurvivesReload(t *testing.T) {
	root := t.TempDir()
	before, after := filepath.Join(root, "before.bin"), filepath.Join(root, "after.bin")
	os.WriteFile(before, []byte("b"), 0o644)
	os.WriteFile(after, []byte("a"), 0o644)
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	provision := func() *FlashServe {
		ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
		t.Cleanup(cancel)
		fsrv := &FlashServe{Root: root, Prewarm: []string{"none-*"}, StatWorkers: 2}
		if err := fsrv.Provision(ctx); err != nil {
			t.Fatal(err)
		}
		return fsrv
	}
	hit := func(fsrv *FlashServe, p string, n int) {
		for range n {
			e, err := fsrv.cache.GetConfined(context.Background(), "", statacc.SymlinksFollow, p)
			if err != nil {
				t.Fatal(err)
			}
			e.Release()
		}
	}
	old := provision()
	hit(old, before, 5)
	next := provision() // the reload: the new config first
	if next.shared != old.shared || next.shared.hot == nil {
		t.Fatal("the reloaded handler has a cache or saver of its own")
	}
	if err := old.Cleanup(); err != nil { // then the old one goes
		t.Fatal(err)
	}
	hit(next, after, 3)
	if err := next.Cleanup(); err != nil { // the last user: the set is saved
		t.Fatal(err)
	}
	hs, err := hotset.Load(hotSetPath(next.cacheKey))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, f := range hs.Files {
		got[f.Path] = f.Hits
	}
	if len(got) != 2 || got[before] < 5 || got[after] < 3 {
		t.Fatalf("saved %+v, want before.bin with 5 hits and after.bin with 3", hs.Files)
	}
}
