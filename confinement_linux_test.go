//go:build linux && !flashserve_portable

package flashserve

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestRootFormsSeeRewrites serves from every form a root takes in a
// Caddyfile (none, so the working directory; relative; "."; ".." inside a
// relative and an absolute root), with symlinks follow and beneath, and
// rewrites a file in place: each rewrite is seen within the inotify bound
// (the keys, the confinement root and the watches are all the same
// canonical path), whole (no old head glued to the new rest), and beneath
// serves the plain files. revalidate stays at its 60 s default, so only
// inotify can make a rewrite seen in time.
func TestRootFormsSeeRewrites(t *testing.T) {
	base := t.TempDir()
	for _, d := range []string{"docs", "sub"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(base) // the working directory is read when the config loads
	forms := []struct {
		name, directive, dir string
	}{
		{"none", "", base},
		{"relative", "root * docs", filepath.Join(base, "docs")},
		{"dot", "root * .", base},
		{"relative-dotdot", "root * sub/../docs", filepath.Join(base, "docs")},
		{"absolute-dotdot", "root * " + base + "/sub/../docs", filepath.Join(base, "docs")},
	}
	const size = 8 << 10 // past the memory cache: a head and a sendfile body
	fill := func(path string, b byte) {
		t.Helper()
		if err := os.WriteFile(path, bytes.Repeat([]byte{b}, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	type site struct {
		name, path string
		port       int
	}
	var sites []site
	var cfg bytes.Buffer
	for _, f := range forms {
		for _, mode := range []string{"follow", "beneath"} {
			s := site{name: f.name + "/" + mode, port: freePort(t)}
			s.path = filepath.Join(f.dir, fmt.Sprintf("f-%s-%s.bin", f.name, mode))
			fill(s.path, 'a')
			cfg.WriteString(siteBlock(s.port, "", f.directive, flashServe("symlinks "+mode)))
			sites = append(sites, s)
		}
	}
	loadSites(t, "", cfg.String())
	c := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(c.CloseIdleConnections)

	const rounds = 7
	var all []time.Duration
	for _, s := range sites {
		url := fmt.Sprintf("http://127.0.0.1:%d/%s", s.port, filepath.Base(s.path))
		if status, _, body := get(t, c, url); status != 200 || !bytes.Equal(body, bytes.Repeat([]byte{'a'}, size)) {
			t.Fatalf("%s: first GET: status %d, %d bytes; want 200 and the file", s.name, status, len(body))
		}
		var delays []time.Duration
		for r := range rounds {
			b := byte('b' + r)
			want := bytes.Repeat([]byte{b}, size)
			fill(s.path, b)
			changed := time.Now()
			for {
				status, _, body := get(t, c, url)
				if status != 200 {
					t.Fatalf("%s round %d: status %d", s.name, r, status)
				}
				// Whole: an old head glued to the new rest never equals it.
				if bytes.Equal(body, want) {
					break
				}
				if time.Since(changed) > time.Second {
					t.Fatalf("%s round %d: the rewrite not seen whole after 1 s (got %d bytes, %q…)", s.name, r, len(body), body[:min(len(body), 16)])
				}
				// Every millisecond, not waitFor's 20 ms: the delay is what
				// the test measures.
				time.Sleep(time.Millisecond)
			}
			delays = append(delays, time.Since(changed))
		}
		slices.Sort(delays)
		median := delays[len(delays)/2]
		t.Logf("%s: rewrite seen after %v (median %v)", s.name, delays, median)
		if median > 100*time.Millisecond {
			t.Errorf("%s: median delay %v, want under 100 ms (the inotify bound)", s.name, median)
		}
		all = append(all, delays...)
	}
	slices.Sort(all)
	t.Logf("all sites: median %v, max %v", all[len(all)/2], all[len(all)-1])
}
