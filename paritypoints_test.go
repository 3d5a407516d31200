package flashserve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// Smaller points where flash_serve must answer as file_server does inside
// a real config: Allow, 404s under a subroute's error routes, a
// re-registered default file system, and the log of a sidecar that cannot
// be opened.

func init() {
	caddy.RegisterModule(memDefaultFS{})
}

// memDefaultFS is a test file system module (caddy.fs.headers_test_mem)
// holding one file that is nowhere on the disk.
type memDefaultFS struct{}

const memDefaultName, memDefaultContent = "headers-test-only-in-memory.txt", "from the registered default file system\n"

var memDefaultFiles = fstest.MapFS{
	memDefaultName: {Data: []byte(memDefaultContent), Mode: 0o644, ModTime: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)},
}

func (memDefaultFS) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "caddy.fs.headers_test_mem", New: func() caddy.Module { return new(memDefaultFS) }}
}

func (memDefaultFS) Open(name string) (fs.File, error) { return memDefaultFiles.Open(name) }

func (*memDefaultFS) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	for d.Next() {
	}
	return nil
}

// TestAllowIsAdded: on a 405, file_server adds "GET, HEAD" to an Allow an
// earlier handler set; flash_serve used to replace it.
func TestAllowIsAdded(t *testing.T) {
	root, _ := headerFixture(t)
	port := freePort(t)
	loadSites(t, "", headerSites(port, root, "set", `header Allow "OPTIONS"`)+
		headerSites(port, root, "add", "header +Allow \"OPTIONS\"\n\theader +Allow \"PUT\""))
	c := newClients(t).h1
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	for site, want := range map[string][]string{"set": {"OPTIONS", "GET, HEAD"}, "add": {"OPTIONS", "PUT", "GET, HEAD"}} {
		for round := range 3 {
			for _, handler := range []string{"file_server", "flash_serve"} {
				r := do(c, base, fmt.Sprintf("%s-%s.test:%d", handler, site, port), parityRequest{method: "POST", target: "/small.txt"})
				if r.err != nil || r.status != http.StatusMethodNotAllowed {
					t.Fatalf("%s %s: %d %v", handler, site, r.status, r.err)
				}
				if got := r.header.Values("Allow"); !slices.Equal(got, want) {
					t.Errorf("round %d, %s, site %s: Allow %q, want %q", round, handler, site, got, want)
				}
			}
		}
	}
}

// TestSubrouteErrorRoutes: a 404 inside a subroute that has error routes
// of its own must reach them, as file_server's does, though the server has
// none. It also checks the server-level case, and that a deferred header
// rule does not apply to the 404, which Caddy writes below it.
func TestSubrouteErrorRoutes(t *testing.T) {
	root, files := headerFixture(t)
	port := freePort(t)
	route := func(host, handler string) map[string]any {
		return map[string]any{
			"match": []any{map[string]any{"host": []string{host}}},
			"handle": []any{map[string]any{
				"handler": "subroute",
				"routes": []any{map[string]any{"handle": []any{
					map[string]any{"handler": "vars", "root": root},
					map[string]any{"handler": "headers", "response": map[string]any{"set": map[string][]string{"X-Deferred": {"on"}}, "deferred": true}},
					map[string]any{"handler": handler},
				}}},
				"errors": map[string]any{"routes": []any{map[string]any{"handle": []any{map[string]any{
					"handler":     "static_response",
					"status_code": "{http.error.status_code}",
					"body":        "subroute error {http.error.status_code}",
				}}}}},
			}},
			"terminal": true,
		}
	}
	cfg := map[string]any{
		"admin":   map[string]any{"disabled": true},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}},
		"apps": map[string]any{"http": map[string]any{"servers": map[string]any{"srv": map[string]any{
			"listen":          []string{fmt.Sprintf("127.0.0.1:%d", port)},
			"automatic_https": map[string]any{"disable": true},
			"routes":          []any{route("fs.test", "file_server"), route("fl.test", "flash_serve")},
		}}}},
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(raw, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { caddy.Stop() })
	c := newClients(t).h1
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	for round := range 3 {
		for _, host := range []string{"fs.test", "fl.test"} {
			r := do(c, base, host, parityRequest{method: "GET", target: "/missing.txt"})
			if r.err != nil || r.status != http.StatusNotFound || string(r.body) != "subroute error 404" {
				t.Errorf("round %d, %s: %d %q %v, want 404 from the subroute's error route", round, host, r.status, r.body, r.err)
			}
			if v := r.header.Get("X-Deferred"); v != "" {
				t.Errorf("round %d, %s: the deferred header rule reached the 404: X-Deferred %q", round, host, v)
			}
			r = do(c, base, host, parityRequest{method: "GET", target: "/small.txt"})
			if r.err != nil || r.status != http.StatusOK || !bytes.Equal(r.body, files["/small.txt"]) || r.header.Get("X-Deferred") != "on" {
				t.Errorf("round %d, %s: /small.txt: %d, X-Deferred %q, %v", round, host, r.status, r.header.Get("X-Deferred"), r.err)
			}
		}
	}
}

// TestDefaultFilesystemReregistered: the global filesystem option may
// register another file system as "default"; file_server then serves from
// it, and so must flash_serve, instead of from the disk. Caddy provisions
// its apps in no fixed order, so the config is loaded several times.
func TestDefaultFilesystemReregistered(t *testing.T) {
	port := freePort(t)
	// The root is relative, as the file system's names are; the file does
	// not exist under the working directory.
	if _, err := os.Stat(memDefaultName); err == nil {
		t.Fatalf("%s exists in the working directory", memDefaultName)
	}
	for load := range 6 {
		loadSites(t, "filesystem default headers_test_mem",
			headerSites(port, ".", "mem", ""))
		c := newClients(t).h1
		base := fmt.Sprintf("http://127.0.0.1:%d", port)
		for _, handler := range []string{"file_server", "flash_serve"} {
			req := parityRequest{method: "GET", target: "/" + memDefaultName}
			r := do(c, base, fmt.Sprintf("%s-mem.test:%d", handler, port), req)
			if droppedByReload(r.err) {
				// Closed or reset by the previous load's listener.
				r = do(c, base, fmt.Sprintf("%s-mem.test:%d", handler, port), req)
			}
			if r.err != nil || r.status != http.StatusOK || string(r.body) != memDefaultContent {
				t.Errorf("load %d, %s: %d %q %v, want the file from the registered default file system", load, handler, r.status, r.body, r.err)
			}
		}
		caddy.Stop()
	}
}

// TestUnreadableSidecarWarnsOnce: a sidecar that exists but cannot be
// opened is skipped (the file itself is sent), with a WARN the first time
// for each path and DEBUG after, instead of a WARN on every request.
func TestUnreadableSidecarWarnsOnce(t *testing.T) {
	// /proc/sys/vm/drop_caches is a regular file that even root may not
	// open for reading: sysctl files check their mode bits for root too.
	const unreadable = "/proc/sys/vm/drop_caches"
	if runtime.GOOS != "linux" {
		t.Skip("needs Linux's " + unreadable)
	}
	if f, err := os.Open(unreadable); err == nil {
		f.Close()
		t.Skipf("%s can be opened here", unreadable)
	} else if _, err := os.Stat(unreadable); err != nil {
		t.Skipf("no %s: %v", unreadable, err)
	}
	root, files := headerFixture(t)
	for _, name := range []string{"small.txt.gz", "page.html.gz"} {
		if err := os.Symlink(unreadable, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	port := freePort(t)
	logFile := filepath.Join(t.TempDir(), "caddy.log")
	loadSites(t, fmt.Sprintf("log {\n\t\toutput file %s\n\t\tformat json\n\t\tlevel DEBUG\n\t\tinclude http.handlers.flash_serve\n\t}", logFile),
		headerSites(port, root, "sidecar", ""))
	c := newClients(t).h1
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	const requests = 5
	for range requests {
		for _, p := range []string{"/small.txt", "/page.html"} {
			r := do(c, base, fmt.Sprintf("flash_serve-sidecar.test:%d", port), parityRequest{method: "GET", target: p, header: http.Header{"Accept-Encoding": {"gzip"}}})
			if r.err != nil || r.status != http.StatusOK || r.header.Get("Content-Encoding") != "" || !bytes.Equal(r.body, files[p]) {
				t.Fatalf("%s: %d, Content-Encoding %q, %v; want the file itself", p, r.status, r.header.Get("Content-Encoding"), r.err)
			}
		}
	}
	// Every request has been answered, and its log line written before the
	// answer; the file output writes through.
	type line struct {
		Level, Msg, Filename string
	}
	levels := map[string][]string{}
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var ln line
		if json.Unmarshal([]byte(l), &ln) != nil || ln.Msg != "opening precompressed file failed" {
			continue
		}
		levels[filepath.Base(ln.Filename)] = append(levels[filepath.Base(ln.Filename)], ln.Level)
	}
	for _, name := range []string{"small.txt.gz", "page.html.gz"} {
		want := append([]string{"warn"}, slices.Repeat([]string{"debug"}, requests-1)...)
		if got := levels[name]; !slices.Equal(got, want) {
			t.Errorf("%s: logged at %q, want %q", name, got, want)
		}
	}
}
