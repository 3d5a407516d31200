package flashserve

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// loadSites loads a Caddyfile made of the test's site blocks behind the
// usual global options (no admin unless asked, logs at ERROR, the
// flash_serve listener wrapper), and stops Caddy when the test ends.
func loadSites(t testing.TB, globals, sites string) {
	t.Helper()
	if !strings.Contains(globals, "admin") {
		globals += "\n\tadmin off"
	}
	if !strings.Contains(globals, "log {") {
		globals += "\n\tlog {\n\t\tlevel ERROR\n\t}"
	}
	cfgText := fmt.Sprintf(`{
	%s
	persist_config off
	storage file_system %s
	servers {
		listener_wrappers {
			flash_serve
		}
	}
}
`, globals, t.TempDir()) + sites
	cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cfgText), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(cfg, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { caddy.Stop() })
}

// get fetches a URL and returns the status, the headers and the body.
func get(t testing.TB, c *http.Client, url string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := c.Get(url)
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
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("counting fds: %v", err)
	}
	return resources{fds: len(ents), goroutines: runtime.NumGoroutine(), threads: threadCount(t)}
}

// settledResources is the baseline of a fault test: the counts once the
// connections a warm-up closed are gone on the server's side too (their
// sockets close a moment after the client's), so that the baseline holds
// no descriptor that would later leave room for a leaked one.
func settledResources(t testing.TB) resources {
	t.Helper()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	last, same := countResources(t), 0
	for deadline := time.Now().Add(5 * time.Second); same < 3 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		now := countResources(t)
		if now.fds == last.fds && now.goroutines == last.goroutines {
			same++
		} else {
			last, same = now, 0
		}
	}
	return last
}

// threadCount reads the process's OS threads from /proc/self/status.
func threadCount(t testing.TB) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatalf("reading /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			var n int
			fmt.Sscan(strings.TrimSpace(v), &n)
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}

// backToBaseline waits up to 30 s for the fds and goroutines to fall back
// to the baseline (with slack for the runtime's and net/http's own), and
// the threads to stay bounded: the Go runtime never gives threads back, so
// a thread count can only be held to a bound, never brought back down.
func backToBaseline(t testing.TB, base resources, threadBound int) {
	t.Helper()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for {
		now := countResources(t)
		if now.fds <= base.fds && now.goroutines <= base.goroutines+2 && now.threads <= threadBound {
			t.Logf("resources: %+v, baseline %+v, thread bound %d", now, base, threadBound)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("resources did not return: now %+v, baseline %+v, thread bound %d; open fds: %v", now, base, threadBound, openFDs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// openFDs lists what the process's descriptors point at, for a failure
// message.
func openFDs() []string {
	ents, _ := os.ReadDir("/proc/self/fd")
	var out []string
	for _, e := range ents {
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		out = append(out, e.Name()+"→"+target)
	}
	return out
}
