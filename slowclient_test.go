//go:build linux

package flashserve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func init() {
	caddy.RegisterModule(sndbufWrapper{})
}

// sndbufWrapper is a test listener wrapper that gives every accepted TCP
// connection a small send buffer (SO_SNDBUF 64 KiB, which the kernel
// doubles), so that a slow client holds the server's writes back at once
// instead of after megabytes of kernel buffering. It leaves the
// connection's type alone, so the flash_serve wrapper listed after it
// still sees a *net.TCPConn.
type sndbufWrapper struct{}

func (sndbufWrapper) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "caddy.listeners.test_sndbuf", New: func() caddy.Module { return new(sndbufWrapper) }}
}

func (sndbufWrapper) WrapListener(ln net.Listener) net.Listener { return sndbufListener{ln} }

func (*sndbufWrapper) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()
	return nil
}

type sndbufListener struct{ net.Listener }

func (l sndbufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(64 << 10)
	}
	return c, err
}

// slowSite is one server of TestSlowClientsKeepCaddysPromise.
type slowSite struct {
	name string // how it sends bodies
	base string // http://127.0.0.1:port
	log  string // its access log
}

// The ways a body can leave, each a server of its own: flash_serve's
// sendfile with the listener wrapper, its copy engine, file_server as the
// reference, the sendfile engine without the wrapper (the copy engine
// then), and the sendfile engine with the wrapper hidden from it (protocols
// without h2: Caddy wraps every connection, and the body handed down is
// copied through Caddy's writer in turns).
var slowKinds = []struct{ name, handler, wrappers, protocols string }{
	{"sendfile", "flash_serve {\n\t\ttransmit sendfile\n\t}", "test_sndbuf\n\t\t\tflash_serve", "h1 h2"},
	{"copy", "flash_serve {\n\t\ttransmit copy\n\t}", "test_sndbuf\n\t\t\tflash_serve", "h1 h2"},
	{"file_server", "file_server", "test_sndbuf\n\t\t\tflash_serve", "h1 h2"},
	{"sendfile-no-wrapper", "flash_serve {\n\t\ttransmit sendfile\n\t}", "test_sndbuf", "h1 h2"},
	{"sendfile-hidden-wrapper", "flash_serve {\n\t\ttransmit sendfile\n\t}", "test_sndbuf\n\t\t\tflash_serve", "h1"},
}

// startSlowSites starts one Caddy with a server per kind for each
// write_idle setting (the value of the Caddyfile's timeouts/write_idle),
// all serving root.
func startSlowSites(t *testing.T, root string, writeIdle []string) map[string][]slowSite {
	t.Helper()
	logDir := t.TempDir()
	var globals, sites strings.Builder
	out := map[string][]slowSite{}
	for _, idle := range writeIdle {
		for _, k := range slowKinds {
			port := freePort(t)
			s := slowSite{name: k.name, base: fmt.Sprintf("http://127.0.0.1:%d", port),
				log: filepath.Join(logDir, fmt.Sprintf("%d.log", port))}
			out[idle] = append(out[idle], s)
			fmt.Fprintf(&globals, "\tservers 127.0.0.1:%d {\n\t\tlistener_wrappers {\n\t\t\t%s\n\t\t}\n\t\ttimeouts {\n\t\t\twrite_idle %s\n\t\t}\n\t\tprotocols %s\n\t}\n",
				port, k.wrappers, idle, k.protocols)
			sites.WriteString(siteBlock(port, root, k.handler, block("log", "output file "+s.log, "format json")))
		}
	}
	cfgText := fmt.Sprintf("{\n\tadmin off\n\tpersist_config off\n\tstorage file_system %s\n\tlog {\n\t\tlevel ERROR\n\t}\n%s}\n",
		t.TempDir(), globals.String()) + sites.String()
	// The servers' options are per server here (their own listener
	// wrappers and write_idle), not caddyGlobals' one servers block.
	loadCaddyfile(t, cfgText)
	return out
}

// slowGet is one response read by a slow client.
type slowGet struct {
	status   int
	length   int64 // Content-Length
	body     []byte
	err      error         // why the body ended early, if it did
	stopped  time.Time     // when the client stopped reading (stopAfter)
	duration time.Duration // from the headers to the end of the body
}

// slowClientGet fetches path from base over a fresh connection with a
// 4 KiB receive buffer, reading the body at rate bytes per second, and
// reading nothing more after stopAfter bytes (0: read it all) until wait
// returns.
func slowClientGet(base, path, rangeHeader string, rate, stopAfter int64, wait func()) slowGet {
	var g slowGet
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		return errors.Join(err, serr)
	}}
	host := strings.TrimPrefix(base, "http://")
	c, err := d.Dial("tcp", host)
	if err != nil {
		g.err = err
		return g
	}
	defer c.Close()
	// A bound on the whole exchange, far above what any case takes.
	c.SetDeadline(time.Now().Add(60 * time.Second))
	req := "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n"
	if rangeHeader != "" {
		req += "Range: " + rangeHeader + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		g.err = err
		return g
	}
	br := bufio.NewReaderSize(c, 4096)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		g.err = err
		return g
	}
	defer resp.Body.Close()
	g.status, g.length = resp.StatusCode, resp.ContentLength
	start := time.Now()
	buf := make([]byte, 8<<10)
	for {
		if stopAfter > 0 && int64(len(g.body)) >= stopAfter {
			g.stopped = time.Now()
			wait()
			stopAfter = 0
		}
		// A steady rate: never more than the bytes due by now.
		due := int64(time.Since(start).Seconds()*float64(rate)) + int64(len(buf))
		if ahead := int64(len(g.body)) + int64(len(buf)) - due; ahead > 0 {
			// The delay is the point: a slow client.
			time.Sleep(time.Duration(ahead) * time.Second / time.Duration(rate))
			continue
		}
		want := buf
		if stopAfter > 0 {
			want = buf[:min(int64(len(buf)), stopAfter-int64(len(g.body)))]
		}
		n, err := resp.Body.Read(want)
		g.body = append(g.body, want[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			g.err = err
			break
		}
	}
	g.duration = time.Since(start)
	return g
}

// accessEntry waits up to bound for the access log entry of uri in path
// and returns when it was first seen and the size it reports.
func accessEntry(path, uri string, bound time.Duration) (time.Time, int64, bool) {
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil {
			for _, line := range bytes.Split(b, []byte("\n")) {
				var e struct {
					Request struct{ URI string } `json:"request"`
					Size    int64                `json:"size"`
				}
				if json.Unmarshal(line, &e) == nil && e.Request.URI == uri {
					return time.Now(), e.Size, true
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Time{}, 0, false
}

// TestSlowClientsKeepCaddysPromise: Caddy renews its write-idle deadline
// after every write of max_write_chunk (64 KiB), so a client that keeps
// reading, however slowly, is never cut; flash_serve's sendfile turns are
// 2 MiB. With write_idle 2s, a client with a 4 KiB receive buffer (and a
// server send buffer of 64 KiB) reads a 4 MiB file at 256 KiB/s, 8 times
// below what one deadline per 2 MiB turn would need: it gets every byte
// from each engine, as from file_server. A client that stops reading is
// still cut, about the idle timeout later. write_min_rate holds over the
// whole body: a client above the rate completes, one below it is cut even
// when the body goes out in many short parts (a multipart range), each of
// which used to restart the rate window.
func TestSlowClientsKeepCaddysPromise(t *testing.T) {
	skipIfShort(t, "slow clients held to Caddy's timeouts for 15 s")
	const (
		size     = 4 << 20
		idle     = 2 * time.Second
		slowRate = 256 << 10
	)
	root := t.TempDir()
	data := make([]byte, size)
	rng := rand.New(rand.NewPCG(14, 4))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if err := os.WriteFile(filepath.Join(root, "big.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	// The rates of write_idle's second argument: below the slow client's
	// (it must be kept), and above the cut client's 128 KiB/s.
	const keepRate, cutRate = "2s 65536", "2s 1048576"
	servers := startSlowSites(t, root, []string{"2s", keepRate, cutRate})

	// 16 ranges of 128 KiB, 256 KiB apart: 2 MiB in 16 parts, each of which
	// a 128 KiB/s client reads in well under the idle timeout.
	var rs []string
	var multiLen int64
	for i := range 16 {
		rs = append(rs, fmt.Sprintf("%d-%d", i<<18, i<<18+128<<10-1))
		multiLen += 128 << 10
	}
	multiRange := "bytes=" + strings.Join(rs, ",")

	// All the clients at once, so that the slow ones share the server; then
	// one subtest per client checks its answer.
	var mu sync.Mutex
	var results []slowResult
	var wg sync.WaitGroup
	add := func(r slowResult) {
		mu.Lock()
		results = append(results, r)
		mu.Unlock()
	}
	for _, s := range servers["2s"] {
		wg.Go(func() {
			add(slowResult{site: s.name, test: "slow", g: slowClientGet(s.base, "/big.bin", "", slowRate, 0, nil)})
		})
		wg.Go(func() {
			// Stops after 256 KiB and waits for the server's access log
			// entry, which is written once the handler has given up.
			r := slowResult{site: s.name, test: "stops"}
			uri := "/big.bin?stop"
			var at time.Time
			r.g = slowClientGet(s.base, uri, "", slowRate, 256<<10, func() {
				at, r.loggedSize, r.logged = accessEntry(s.log, uri, 10*idle)
			})
			r.cutAfter = at.Sub(r.g.stopped)
			add(r)
		})
	}
	for _, s := range servers[keepRate] {
		wg.Go(func() {
			add(slowResult{site: s.name, test: "above min_rate", g: slowClientGet(s.base, "/big.bin", "", slowRate, 0, nil)})
		})
	}
	for _, s := range servers[cutRate] {
		wg.Go(func() {
			add(slowResult{site: s.name, test: "below min_rate", g: slowClientGet(s.base, "/big.bin", multiRange, 128<<10, 0, nil)})
		})
	}
	wg.Wait()

	sort.Slice(results, func(i, j int) bool {
		return results[i].test+results[i].site < results[j].test+results[j].site
	})
	var cutDelays []time.Duration
	for _, r := range results {
		t.Run(r.test+"/"+r.site, func(t *testing.T) {
			if cut, ok := r.check(t, data, idle, slowRate); ok {
				cutDelays = append(cutDelays, cut)
			}
		})
	}
	// A loaded machine delays the log entry and the goroutine reading it:
	// the median is held to 2× the idle timeout, each to 10× (above).
	if len(cutDelays) > 0 {
		sort.Slice(cutDelays, func(i, j int) bool { return cutDelays[i] < cutDelays[j] })
		if med := cutDelays[len(cutDelays)/2]; med > 2*idle {
			t.Errorf("a client that stops reading is cut a median %v after it stops; want about the idle timeout %v", med, idle)
		}
	}
}

// slowResult is one client of TestSlowClientsKeepCaddysPromise.
type slowResult struct {
	site, test string
	g          slowGet
	cutAfter   time.Duration // stop-reading case: from the stop to the server's end
	logged     bool
	loggedSize int64
}

// check holds the client's answer to what its test promises; for a client
// that stopped reading, it also returns how long after the stop the server
// let go, for the median.
func (r slowResult) check(t *testing.T, data []byte, idle time.Duration, slowRate int) (cut time.Duration, measured bool) {
	size := int64(len(data))
	g := r.g
	t.Logf("%-14s %-20s status %d, %d of %d bytes in %v, cut after the stop: %v, err: %v",
		r.test, r.site, g.status, len(g.body), g.length, g.duration.Round(time.Millisecond), r.cutAfter.Round(time.Millisecond), g.err)
	switch r.test {
	case "slow", "above min_rate":
		if g.status != http.StatusOK || g.err != nil || !bytes.Equal(g.body, data) {
			t.Errorf("%s, %s: status %d, %d of %d bytes (exact: %v), %v; a client reading %d KiB/s must get the whole file",
				r.test, r.site, g.status, len(g.body), size, bytes.Equal(g.body, data), g.err, slowRate>>10)
		}
	case "stops":
		if !r.logged {
			t.Errorf("stops, %s: the server still held the response %v after the client stopped reading", r.site, 10*idle)
			return 0, false
		}
		cut, measured = r.cutAfter, true
		if r.loggedSize >= size || int64(len(g.body)) >= size || g.err == nil {
			t.Errorf("stops, %s: the server sent %d bytes, the client read %d (%v); want the body cut", r.site, r.loggedSize, len(g.body), g.err)
		}
		// The server cannot have given up before the idle timeout after
		// the last byte it sent, which was no earlier than the stop
		// less what the buffers hold (the client's 8 KiB; the server's
		// 128 KiB left the moment the client stopped).
		if r.cutAfter < idle*3/4 {
			t.Errorf("stops, %s: cut %v after the client stopped reading, before the idle timeout of %v", r.site, r.cutAfter, idle)
		}
	case "below min_rate":
		if g.status != http.StatusPartialContent {
			t.Errorf("below min_rate, %s: status %d, want 206", r.site, g.status)
		}
		if g.err == nil || int64(len(g.body)) >= g.length {
			t.Errorf("below min_rate, %s: %d of %d bytes (%v); a client at 128 KiB/s under a 1 MiB/s minimum must be cut",
				r.site, len(g.body), g.length, g.err)
		}
	}
	return cut, measured
}
