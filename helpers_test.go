package flashserve

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"

	"github.com/flashserve/caddy-flash-serve/internal/proctest"
	"github.com/flashserve/caddy-flash-serve/prewarm"

	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// caddyGlobals is the global options block of a test's Caddyfile. The
// defaults are what every test wants: no admin endpoint, logs at ERROR
// (unless options holds a log block), no persisted config, storage in a
// fresh directory, and flash_serve's listener wrapper on every server.
type caddyGlobals struct {
	admin     string   // the admin endpoint's address; "" turns it off
	options   []string // more global options, in order (metrics, a log block, TLS settings)
	protocols string   // the servers' protocols; "" for Caddy's default
	wrappers  []string // listener wrappers before flash_serve's (accept_log)
	storage   string   // the storage directory; "" for a fresh one
}

func (g caddyGlobals) text(t testing.TB) string {
	lines := make([]string, 0, len(g.options)+5)
	if g.admin != "" {
		lines = append(lines, "admin "+g.admin)
	} else if !slices.ContainsFunc(g.options, isDirective("admin")) {
		lines = append(lines, "admin off")
	}
	lines = append(lines, g.options...)
	if !slices.ContainsFunc(g.options, isDirective("log")) {
		lines = append(lines, block("log", "level ERROR"))
	}
	if g.storage == "" {
		g.storage = t.TempDir()
	}
	lines = append(lines, "persist_config off", "storage file_system "+g.storage)
	var servers []string
	if g.protocols != "" {
		servers = append(servers, "protocols "+g.protocols)
	}
	servers = append(servers, block("listener_wrappers", append(slices.Clip(g.wrappers), "flash_serve")...))
	return block("", append(lines, block("servers", servers...))...) + "\n"
}

// isDirective matches a Caddyfile line that starts with the directive name.
func isDirective(name string) func(string) bool {
	return func(line string) bool { return line == name || strings.HasPrefix(line, name+" ") }
}

// siteBlock is one site block of a test's Caddyfile: the site
// http://127.0.0.1:<port>, bound to 127.0.0.1 only (tests listen nowhere
// else), with "root * <root>" first unless root is empty, then the
// directives in the order given. Build nested blocks with block and
// flashServe.
func siteBlock(port int, root string, directives ...string) string {
	return siteAt(fmt.Sprintf("http://127.0.0.1:%d", port), root, directives...)
}

// siteAt is siteBlock for any site address (a host name, https).
func siteAt(addr, root string, directives ...string) string {
	lines := []string{"bind 127.0.0.1"}
	if root != "" {
		lines = append(lines, "root * "+root)
	}
	return block(addr, append(lines, directives...)...) + "\n"
}

// block is a Caddyfile directive (or site address) with a block of lines,
// each indented one level (a line of several lines, a nested block, is
// indented as a whole; empty lines are left out), or head alone when there
// are no lines. An empty head is the global options block.
func block(head string, lines ...string) string {
	var b strings.Builder
	for _, l := range lines {
		for _, sub := range strings.Split(l, "\n") {
			if strings.TrimSpace(sub) != "" {
				b.WriteString("\t" + sub + "\n")
			}
		}
	}
	if b.Len() == 0 {
		return head
	}
	return strings.TrimPrefix(head+" {\n", " ") + b.String() + "}"
}

// flashServe is the flash_serve directive with its options, one a line.
func flashServe(options ...string) string { return block("flash_serve", options...) }

// loadSites loads a Caddyfile made of the test's site blocks behind the
// usual global options (caddyGlobals' defaults, with the lines of globals
// added: an admin endpoint, metrics, a log), and stops Caddy when the test
// ends.
func loadSites(t testing.TB, globals, sites string) {
	t.Helper()
	var g caddyGlobals
	if globals != "" {
		g.options = []string{globals}
	}
	loadCaddyfile(t, g.text(t)+sites)
}

// loadCaddyfile adapts and loads a whole Caddyfile, and stops Caddy when
// the test ends.
func loadCaddyfile(t testing.TB, text string) {
	t.Helper()
	loadConfig(t, adaptCaddyfile(t, text))
}

// adaptCaddyfile adapts a Caddyfile to JSON, logging the adapter's
// warnings.
func adaptCaddyfile(t testing.TB, text string) []byte {
	t.Helper()
	cfg, warn, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(text), nil)
	if err != nil {
		t.Fatalf("adapting: %v\n%s", err, text)
	}
	for _, w := range warn {
		t.Logf("adapt warning: %s", w.String())
	}
	return cfg
}

// loadConfig loads a JSON config, and stops Caddy when the test ends.
func loadConfig(t testing.TB, cfg []byte) {
	t.Helper()
	if err := caddy.Load(cfg, true); err != nil {
		t.Fatalf("loading: %v", err)
	}
	t.Cleanup(func() { caddy.Stop() })
}

// waitFor polls ok every 20 ms until it holds, and fails the test once d
// has passed without it.
func waitFor(t testing.TB, what string, d time.Duration, ok func() bool) {
	t.Helper()
	eventually(t, d, func() error {
		if ok() {
			return nil
		}
		return fmt.Errorf("timed out after %v waiting for %s", d, what)
	})
}

// eventually polls check every 20 ms until it returns nil, and fails the
// test with check's last error once d has passed: the state the test
// waited for, and what it saw instead.
func eventually(t testing.TB, d time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// settled samples a count every 100 ms until it is the same three times
// in a row (at most 5 s), and returns it: a baseline taken once the
// connections a warm-up closed are gone on the server's side too (their
// sockets close a moment after the client's), so that it holds no
// descriptor that would later leave room for a leaked one.
func settled[T comparable](sample func() T) T {
	last, same := sample(), 0
	for deadline := time.Now().Add(5 * time.Second); same < 3 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		if now := sample(); now == last {
			same++
		} else {
			last, same = now, 0
		}
	}
	return last
}

// droppedByReload reports whether err is a connection closed or reset
// before any byte of its answer: what a listener of a stopping config does
// to a connection it accepted as it stopped (for either handler, as the
// README's limits say), which no config answered. Such a request is sent
// again.
func droppedByReload(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// skipIfShort skips one of the long tests (about 10 s or more on a quiet
// 2-core machine) in -short mode, the README's test command. CI runs the
// whole suite without -short (and with -race) after it, so every one of
// them runs on each change.
func skipIfShort(t *testing.T, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("%s: skipped in -short mode; CI runs it (bash .ci/run)", what)
	}
}

// get fetches a URL and returns the status, the headers and the body.
func get(t testing.TB, c *http.Client, url string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := c.Get(url)
	return readAnswer(t, url, resp, err)
}

// getAfterReload is get for the first request after a reload: one that
// the old config's listener dropped (droppedByReload) is sent again, once.
func getAfterReload(t testing.TB, c *http.Client, url string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil && droppedByReload(err) {
		t.Logf("GET %s right after a reload: %v; again", url, err)
		resp, err = c.Get(url)
	}
	return readAnswer(t, url, resp, err)
}

// readAnswer reads the response to a GET of url, failing the test on an error.
func readAnswer(t testing.TB, url string, resp *http.Response, err error) (int, http.Header, []byte) {
	t.Helper()
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	return resp.StatusCode, resp.Header, b
}

// resources are the counts a fault test must find again at its end.
type resources struct{ fds, goroutines, threads int }

func countResources(t testing.TB) resources {
	t.Helper()
	return resources{fds: proctest.FDs(t), goroutines: runtime.NumGoroutine(), threads: proctest.Threads(t)}
}

// settledResources is the baseline of a fault test: the counts once the
// fds and goroutines have settled (the threads can only grow, and are
// held to a bound instead).
func settledResources(t testing.TB) resources {
	t.Helper()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	var last resources
	settled(func() [2]int {
		last = countResources(t)
		return [2]int{last.fds, last.goroutines}
	})
	return last
}

// backToBaseline waits up to 30 s for the fds and goroutines to fall back
// to the baseline (with slack for the runtime's and net/http's own), and
// the threads to stay bounded: the Go runtime never gives threads back, so
// a thread count can only be held to a bound, never brought back down.
func backToBaseline(t testing.TB, base resources, threadBound int) {
	t.Helper()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	var now resources
	eventually(t, 30*time.Second, func() error {
		now = countResources(t)
		if now.fds <= base.fds && now.goroutines <= base.goroutines+2 && now.threads <= threadBound {
			return nil
		}
		return notBack{now, base, threadBound}
	})
	t.Logf("resources: %+v, baseline %+v, thread bound %d", now, base, threadBound)
}

// notBack is backToBaseline's failure; it lists the open fds only when
// the test fails, not on every poll.
type notBack struct {
	now, base   resources
	threadBound int
}

func (e notBack) Error() string {
	return fmt.Sprintf("resources did not return: now %+v, baseline %+v, thread bound %d; open fds: %v", e.now, e.base, e.threadBound, proctest.FDTargets())
}

// evictedTree writes files (name → bytes) into a test directory named
// name, synced, and evicts each from the page cache, so that the first
// read of each goes to the disk.
func evictedTree(t *testing.T, name string, files map[string][]byte) string {
	t.Helper()
	root := testDir(t, name, func(dir string) {
		for name, b := range files {
			f, err := os.Create(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			// Synced: the kernel drops only clean pages on eviction.
			if _, err := f.Write(b); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	})
	for name := range files {
		if err := prewarm.Evict(filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// counterReaches waits up to two seconds for a counter to reach want and
// returns its value: a transfer's bytes are counted when the write that
// sent them returns, which can be just after the client has read them.
func counterReaches(c *atomic.Int64, want int64) int64 {
	for deadline := time.Now().Add(2 * time.Second); c.Load() < want && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	return c.Load()
}
