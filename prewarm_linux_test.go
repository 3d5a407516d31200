//go:build linux && !flashserve_portable

package flashserve

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/flashserve/caddy-flash-serve/internal/hotset"
	"github.com/flashserve/caddy-flash-serve/prewarm"
	"github.com/flashserve/caddy-flash-serve/statacc"
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
			e, err := a.cache.GetCounted(context.Background(), nil, "", statacc.SymlinksFollow, p)
			if err != nil {
				t.Fatal(err)
			}
			e.Release()
		}
	}
	if err := a.Cleanup(); err != nil { // the last user: the hot set is saved
		t.Fatal(err)
	}
	hs, err := hotset.Load(hotSetPath(a.cacheKey))
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
		eventually(t, time.Until(deadline), func() error {
			r, err := prewarm.FileResidency(p)
			if err != nil {
				t.Fatal(err)
			}
			if r.Percent() < 100 {
				return fmt.Errorf("%s is %.0f%% resident after the restart", p, r.Percent())
			}
			return nil
		})
	}
}

// TestPrewarmAtLoadWithRootDirective loads Caddyfiles that set the root
// the usual way, with the root directive (at the site's top, inside a
// handle block, relative to the working directory), and makes no request:
// the files under each root must come into the page cache by themselves,
// and a directory under no root must stay out of it.
func TestPrewarmAtLoadWithRootDirective(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	base := t.TempDir()
	dirs := map[string]string{}
	var all []string
	for _, name := range []string{"site", "static", "unrelated"} {
		dir := filepath.Join(base, name)
		os.Mkdir(dir, 0o755)
		dirs[name] = dir
		for i := range 4 {
			p := filepath.Join(dir, fmt.Sprintf("f%d.bin", i))
			if err := os.WriteFile(p, []byte(strings.Repeat(name[:1], 256<<10)), 0o644); err != nil {
				t.Fatal(err)
			}
			all = append(all, p)
		}
	}
	resident := func(p string) float64 {
		r, err := prewarm.FileResidency(p)
		if err != nil {
			t.Fatal(err)
		}
		return r.Percent()
	}
	evictAll(t, all)
	wd, _ := os.Getwd()
	relStatic, err := filepath.Rel(wd, dirs["static"])
	if err != nil {
		t.Fatal(err)
	}
	loadSites(t, "", siteBlock(freePort(t), dirs["site"], flashServe("prewarm *"))+
		siteBlock(freePort(t), "", block("handle /static/*", "root * "+relStatic, flashServe("prewarm *.bin"))))

	start := time.Now()
	for _, name := range []string{"site", "static"} {
		for i := range 4 {
			p := filepath.Join(dirs[name], fmt.Sprintf("f%d.bin", i))
			eventually(t, time.Until(start.Add(20*time.Second)), func() error {
				if pct := resident(p); pct < 100 {
					return fmt.Errorf("%s is %.0f%% resident %v after the load, with no request", p, pct, time.Since(start))
				}
				return nil
			})
		}
	}
	t.Logf("both roots resident %v after the load", time.Since(start))
	for i := range 4 {
		p := filepath.Join(dirs["unrelated"], fmt.Sprintf("f%d.bin", i))
		if pct := resident(p); pct > 0 {
			t.Errorf("%s, under no root, is %.0f%% resident", p, pct)
		}
	}
}

// TestPrewarmSaysWhatItWaitsFor: a root with a request placeholder is
// known only from a request. Prewarm says so once at INFO, warms nothing
// before, and warms the root the first request names.
func TestPrewarmSaysWhatItWaitsFor(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	base := t.TempDir()
	dir := filepath.Join(base, "127.0.0.1")
	os.Mkdir(dir, 0o755)
	var files []string
	for i := range 3 {
		p := filepath.Join(dir, fmt.Sprintf("f%d.bin", i))
		os.WriteFile(p, []byte(strings.Repeat("p", 128<<10)), 0o644)
		files = append(files, p)
	}
	evictAll(t, files)
	logFile := filepath.Join(t.TempDir(), "caddy.log")
	port := freePort(t)
	loadSites(t, fmt.Sprintf("log {\n\t\toutput file %s\n\t\tlevel INFO\n\t}", logFile), siteBlock(port, base+"/{http.request.host}", flashServe("prewarm *")))
	var line string
	eventually(t, 10*time.Second, func() error {
		b, _ := os.ReadFile(logFile)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "prewarm waits for the first request") {
				line = l
				return nil
			}
		}
		return fmt.Errorf("no INFO line about what prewarm waits for; the log:\n%s", b)
	})
	if !strings.Contains(line, "placeholder") {
		t.Errorf("the INFO line does not say why: %s", line)
	}
	for _, p := range files {
		if r, _ := prewarm.FileResidency(p); r.Resident > 0 {
			t.Fatalf("%s warmed before any request named the root", p)
		}
	}
	if status, _, _ := get(t, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/f0.bin", port)); status != 200 {
		t.Fatalf("status %d", status)
	}
	waitFor(t, "the root the first request named to be warmed", 20*time.Second, func() bool {
		for _, p := range files[1:] { // f0 was read by the request itself
			if r, _ := prewarm.FileResidency(p); r.Percent() < 100 {
				return false
			}
		}
		return true
	})
}

// evictAll drops the files from the page cache, and fails the test if the
// kernel keeps any page of them: a residency test would prove nothing.
func evictAll(t *testing.T, paths []string) {
	t.Helper()
	for _, p := range paths {
		eventually(t, 10*time.Second, func() error {
			if f, err := os.Open(p); err == nil {
				f.Sync() // dirty pages stay whatever DONTNEED says
				f.Close()
			}
			if err := prewarm.Evict(p); err != nil {
				t.Fatal(err)
			}
			r, err := prewarm.FileResidency(p)
			if err != nil {
				t.Fatal(err)
			}
			if r.Resident > 0 {
				return fmt.Errorf("%s stays %.0f%% resident after DONTNEED", p, r.Percent())
			}
			return nil
		})
	}
}
