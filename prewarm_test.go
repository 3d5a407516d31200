package flashserve

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
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
	eventually(t, 5*time.Second, func() error {
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			return fmt.Errorf("%d goroutines, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
		}
		return nil
	})
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
			e, err := fsrv.cache.GetCounted(context.Background(), nil, "", statacc.SymlinksFollow, p)
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

// TestHotSetHoldsAUniformTree is workload e at a reduced scale: a tree
// requested uniformly, far larger than the descriptors the cache keeps,
// that fits the prewarm budget whole. The saved hot set must hold every
// file of it, though most entries left the cache long before the save.
func TestHotSetHoldsAUniformTree(t *testing.T) {
	const files, maxOpen = 6000, 300 // e: 100,000 files, 5,000 descriptors
	root := t.TempDir()
	paths := make([]string, files)
	for i := range files {
		dir := filepath.Join(root, fmt.Sprintf("d%02d", i/500))
		if i%500 == 0 {
			os.Mkdir(dir, 0o755)
		}
		paths[i] = filepath.Join(dir, fmt.Sprintf("f%04d.bin", i))
		if err := os.WriteFile(paths[i], []byte("e"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	fsrv := &FlashServe{Root: root, Prewarm: []string{"none-*"}, StatWorkers: 2, MaxOpenFiles: maxOpen}
	if err := fsrv.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	// Every file twice, in a random order: uniform, and each file keeps a
	// count through one decay, should a 30 s save come in between.
	order := append(slices.Clone(paths), paths...)
	rand.New(rand.NewPCG(5, 5)).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for _, p := range order {
		e, err := fsrv.cache.GetCounted(context.Background(), nil, "", statacc.SymlinksFollow, p)
		if err != nil {
			t.Fatal(err)
		}
		e.Release()
	}
	live := fsrv.cache.Snapshot()[statacc.Entries]
	if err := fsrv.Cleanup(); err != nil { // the last user: the set is saved
		t.Fatal(err)
	}
	hs, err := hotset.Load(hotSetPath(fsrv.cacheKey))
	if err != nil {
		t.Fatal(err)
	}
	saved := make(map[string]bool, len(hs.Files))
	for _, f := range hs.Files {
		saved[f.Path] = true
	}
	held := 0
	for _, p := range paths {
		if saved[p] {
			held++
		}
	}
	t.Logf("%d requests over %d files, %d entries cached at the end: the saved hot set holds %d files, %d of the tree", len(order), files, live, len(hs.Files), held)
	if held != files {
		t.Fatalf("the saved hot set holds %d of the %d files requested", held, files)
	}
}

// TestWarmUpsSeeResponses: the warm-ups' Busy says requests are being
// served from a response until a window without one has passed.
func TestWarmUpsSeeResponses(t *testing.T) {
	var n atomic.Int64
	r := &responses{count: n.Load, window: 50 * time.Millisecond}
	deadline := time.Now().Add(10 * time.Second)
	for r.serving() { // no response yet: idle once the first window ends
		if time.Now().After(deadline) {
			t.Fatal("busy with no response at all")
		}
		time.Sleep(5 * time.Millisecond)
	}
	n.Add(1)
	if !r.serving() {
		t.Fatal("not busy right after a response")
	}
	start := time.Now()
	for r.serving() {
		if time.Now().After(deadline) {
			t.Fatal("still busy 10 s after the last response")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if quiet := time.Since(start); quiet < r.window {
		t.Fatalf("idle %v after a response, before the %v window ended", quiet, r.window)
	}
}

// TestOnlyTheHotSetPassIsForeground: the hot-set pass at start-up reads
// at full width while requests wait for the disk (Cold) and is not
// Background; the paths and keep_hot passes are Background (a twentieth
// of a core while requests are served) and do not ask Cold, so that
// after a restart they do not take a quarter of the core from the
// requests the hot set made fast. Only the background passes read under
// the byte budget while requests are served (BusyRate): the hot set
// reads what the requests ask for.
func TestOnlyTheHotSetPassIsForeground(t *testing.T) {
	for _, c := range []struct {
		pass       string
		background bool
	}{{"hot set", false}, {"paths", true}, {"keep_hot", true}} {
		const rate = 3 << 20
		w := passWarmer(c.pass, rate)
		if want := map[bool]int64{true: rate}[c.background]; w.BusyRate != want {
			t.Errorf("%s: BusyRate %d, want %d", c.pass, w.BusyRate, want)
		}
		if w.Busy == nil {
			t.Errorf("%s: no Busy: the pass would not yield to requests at all", c.pass)
		}
		if w.Background != c.background || (w.Cold == nil) != c.background {
			t.Errorf("%s: Background %v, Cold set %v; want Background %v, Cold set %v", c.pass, w.Background, w.Cold != nil, c.background, !c.background)
		}
	}
}
