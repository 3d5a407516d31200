//go:build linux

package flashserve

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/flashserve/caddy-flash-serve/internal/handover"
)

// What a reload may drop is in internal/handover's doc: in short, a
// connection no server accepted, or one a replaced generation accepted,
// closed before any response.

// listeningSockets counts the TCP sockets listening on 127.0.0.1:port, as
// the kernel lists them: two while a handover is in progress.
func listeningSockets(t testing.TB, port int) int {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("0100007F:%04X", port)
	n := 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && f[1] == want && f[3] == "0A" {
			n++
		}
	}
	return n
}

// reloadSite is one site of TestReloadsUnderLoad and what its clients saw.
type reloadSite struct {
	handler string
	port    int
	files   map[string][]byte
	// byGen counts the responses each generation gave.
	byGen                                 [102]atomic.Int64
	responses, neverAccepted, closedByOld atomic.Int64
	reused                                atomic.Int64
}

// rawClient is an HTTP/1.1 client of one site that dials from ports it
// chose, so that the accept log tells which generation accepted each
// connection, and that tells apart a drop before any response from a
// response cut short.
type rawClient struct {
	t    *testing.T
	site *reloadSite
	conn net.Conn
	br   *bufio.Reader
	read int64 // bytes read from conn since the last request was sent
	self int   // conn's local port
	uses int
}

func (c *rawClient) Read(p []byte) (int, error) {
	n, err := c.conn.Read(p)
	c.read += int64(n)
	return n, err
}

func (c *rawClient) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// dial connects from a port of its own (handover.Dial). A reset at
// connect is returned as a drop, anything else fails the test.
func (c *rawClient) dial() (dropped bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := handover.Dial(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", c.site.port))
	var de *handover.DialError
	switch {
	case err == nil:
		c.conn, c.br, c.self, c.uses = conn, bufio.NewReader(c), conn.LocalAddr().(*net.TCPAddr).Port, 0
		return false
	case errors.As(err, &de) && errors.Is(err, syscall.ECONNRESET):
		c.self = de.Port
		return true
	default:
		c.t.Errorf("%s: %v", c.site.handler, err)
		return false
	}
}

// get fetches name, and on a drop before any response, that the handover
// explains, tries again on a new connection. It reports false once it has
// failed the test.
func (c *rawClient) get(name string) bool {
	s := c.site
	for attempt := 0; attempt < 50; attempt++ {
		if c.conn == nil {
			dropped := c.dial()
			if !dropped && c.conn == nil {
				return false
			}
			if dropped {
				if !c.explainDrop(fmt.Errorf("connect: %w", syscall.ECONNRESET)) {
					return false
				}
				continue
			}
		}
		if c.uses > 0 {
			s.reused.Add(1)
		}
		c.uses++
		c.conn.SetDeadline(time.Now().Add(30 * time.Second))
		c.read = 0
		_, err := fmt.Fprintf(c.conn, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", name)
		var resp *http.Response
		if err == nil {
			// Peek first, as net/http's transport does: a connection closed
			// before any byte is io.EOF, where ReadResponse would say
			// io.ErrUnexpectedEOF.
			_, err = c.br.Peek(1)
		}
		if err == nil {
			resp, err = http.ReadResponse(c.br, nil)
		}
		if err != nil {
			c.close()
			if c.read != 0 {
				c.t.Errorf("%s %s: response cut after %d bytes: %v", s.handler, name, c.read, err)
				return false
			}
			if !c.explainDrop(err) {
				return false
			}
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		gen, accepted := handover.AcceptedBy(c.self)
		g, _ := strconv.Atoi(resp.Header.Get("X-Generation"))
		switch {
		case err != nil:
			c.t.Errorf("%s %s: body cut after %d bytes: %v", s.handler, name, len(body), err)
		case resp.StatusCode != 200 || !bytes.Equal(body, s.files[name]):
			c.t.Errorf("%s %s: status %d, %d bytes (want 200, %d exact bytes)", s.handler, name, resp.StatusCode, len(body), len(s.files[name]))
		case !accepted || g != gen || g <= 0 || g >= len(s.byGen):
			c.t.Errorf("%s %s: answered by generation %q on a connection accepted by generation %d (logged: %v)",
				s.handler, name, resp.Header.Get("X-Generation"), gen, accepted)
		default:
			s.responses.Add(1)
			s.byGen[g].Add(1)
			if resp.Close {
				c.close()
			}
			return true
		}
		c.close()
		return false
	}
	c.t.Errorf("%s %s: dropped 50 times in a row", s.handler, name)
	return false
}

// explainDrop decides whether a connection closed before any response is
// one the handover may drop: no server accepted it, or a generation that a
// newer one has replaced did. A drop by the newest generation fails.
func (c *rawClient) explainDrop(err error) bool {
	s := c.site
	if !handover.IsDrop(err) {
		c.t.Errorf("%s: %v", s.handler, err)
		return false
	}
	switch v, gen := handover.Explain(c.self, s.port); v {
	case handover.NeverAccepted:
		s.neverAccepted.Add(1)
	case handover.ByReplaced:
		s.closedByOld.Add(1)
	default:
		c.t.Errorf("%s: generation %d, the newest, closed a connection without an answer: %v", s.handler, gen, err)
		return false
	}
	return true
}

// TestReloadsUnderLoad reloads a config of two sites, file_server and
// flash_serve, 100 times through the admin API while clients fetch files
// from both: every response is whole, exact and from the generation that
// accepted its connection, and a connection closed before any response is
// one the handover may drop (see above); anything else fails: a drop by
// the newest generation, a cut or wrong body, a refused connect, a failed
// /load. Each reload waits for events, not for time: the old sockets gone
// from the kernel's table, and the new generation answering on each site.
func TestReloadsUnderLoad(t *testing.T) {
	skipIfShort(t, "100 reloads under load")
	root := t.TempDir()
	files := map[string][]byte{
		"/small.txt": []byte("small and in memory\n"),
		"/mid.bin":   bytes.Repeat([]byte("0123456789abcdef"), 8<<10),
		"/big.bin":   bytes.Repeat([]byte("fedcba9876543210"), 256<<10),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(root, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	handover.Reset()
	adminPort := freePort(t)
	sites := []*reloadSite{
		{handler: "file_server", port: freePort(t), files: files},
		{handler: "flash_serve", port: freePort(t), files: files},
	}
	storage := t.TempDir()
	config := func(gen int) []byte {
		g := caddyGlobals{admin: fmt.Sprintf("127.0.0.1:%d", adminPort), storage: storage, wrappers: []string{fmt.Sprint("accept_log ", gen)}}
		text := g.text(t)
		for _, s := range sites {
			text += siteBlock(s.port, root, fmt.Sprint("header X-Generation ", gen), s.handler)
		}
		return adaptCaddyfile(t, text)
	}
	// One connection per /load, so that none is reused across the admin
	// endpoint's own handover, and no retry: the load must succeed.
	adminClient := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	await := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out after 30 s waiting for %s", what)
			}
			// Every millisecond, not waitFor's 20 ms: the next reload
			// follows at once, so that the handovers come as fast as
			// the events allow.
			time.Sleep(time.Millisecond)
		}
	}
	handedOver := func(gen int) {
		t.Helper()
		await(fmt.Sprintf("the old sockets to close (generation %d)", gen), func() bool {
			for _, port := range []int{adminPort, sites[0].port, sites[1].port} {
				if listeningSockets(t, port) != 1 {
					return false
				}
			}
			return true
		})
	}
	if err := caddy.Load(config(1), true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { caddy.Stop() })
	handedOver(1)

	// Warm up, so that the cached entries are in the baseline.
	for _, s := range sites {
		c := &rawClient{t: t, site: s}
		for name := range files {
			if !c.get(name) {
				t.FailNow()
			}
		}
		c.close()
	}
	base := settledResources(t)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	stop := func() { cancel(); wg.Wait() }
	defer stop() // before Caddy stops, also when the test fails
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &rawClient{t: t, site: sites[w%len(sites)]}
			defer c.close()
			names := []string{"/small.txt", "/mid.bin", "/big.bin"}
			for i := w; ctx.Err() == nil; i++ {
				if !c.get(names[i%len(names)]) {
					return
				}
			}
		}()
	}
	const reloads = 100
	for gen := 2; gen <= reloads+1 && !t.Failed(); gen++ {
		resp, err := adminClient.Post(fmt.Sprintf("http://127.0.0.1:%d/load", adminPort), "application/json", bytes.NewReader(config(gen)))
		if err != nil {
			t.Errorf("reload %d: %v", gen, err)
			break
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("reload %d: %d %s", gen, resp.StatusCode, b)
			break
		}
		handedOver(gen)
		// Requests on the new config before the next reload, as a config
		// lives in practice.
		await(fmt.Sprintf("generation %d to answer on both sites", gen), func() bool {
			return t.Failed() || sites[0].byGen[gen].Load() >= 2 && sites[1].byGen[gen].Load() >= 2
		})
	}
	stop()
	for _, s := range sites {
		t.Logf("%s: %d responses (%d on reused connections) during %d reloads; dropped before any response: %d never accepted, %d closed by a replaced generation",
			s.handler, s.responses.Load(), s.reused.Load(), reloads, s.neverAccepted.Load(), s.closedByOld.Load())
	}
	if t.Failed() {
		return
	}
	adminClient.CloseIdleConnections()
	backToBaseline(t, base, base.threads+16)
}
