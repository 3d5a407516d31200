//go:build linux && !flashserve_portable

package flashserve

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/flashserve/caddy-flash-serve/internal/ringtest"
	"github.com/flashserve/caddy-flash-serve/prewarm"
)

// zeroWindowConn is an h2c connection whose client advertised an initial
// stream window of 0 (SETTINGS_INITIAL_WINDOW_SIZE) and never sends a
// WINDOW_UPDATE: every response body asked for on it waits in the
// server's Write for as long as the connection lasts, as a client that
// never reads makes it wait.
type zeroWindowConn struct {
	conn    net.Conn
	fr      *http2.Framer
	host    string
	next    uint32       // the next stream's id
	headers atomic.Int64 // response HEADERS received: bodies the server has begun to write
	resets  atomic.Int64 // streams the server reset
	hbuf    bytes.Buffer
	enc     *hpack.Encoder
	done    chan struct{}
}

// dialZeroWindow opens a zeroWindowConn to addr (host:port) and reads its
// frames, counting the responses' HEADERS, until close.
func dialZeroWindow(t *testing.T, addr string) *zeroWindowConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	z := &zeroWindowConn{conn: c, fr: http2.NewFramer(c, c), host: addr, next: 1, done: make(chan struct{})}
	z.enc = hpack.NewEncoder(&z.hbuf)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := z.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := z.fr.ReadFrame()
		if err != nil {
			t.Fatalf("h2c handshake: %v", err)
		}
		if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
			if err := z.fr.WriteSettingsAck(); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	c.SetDeadline(time.Time{})
	go func() {
		defer close(z.done)
		for {
			f, err := z.fr.ReadFrame()
			if err != nil {
				return
			}
			switch f.(type) {
			case *http2.HeadersFrame:
				z.headers.Add(1)
			case *http2.RSTStreamFrame:
				z.resets.Add(1)
			case *http2.GoAwayFrame:
				return
			}
		}
	}()
	return z
}

// get asks for path on a new stream, with the header fields of extra
// (name, value, ...).
func (z *zeroWindowConn) get(path string, extra ...string) error {
	z.hbuf.Reset()
	fields := append([]string{":method", "GET", ":scheme", "http", ":authority", z.host, ":path", path}, extra...)
	for i := 0; i+1 < len(fields); i += 2 {
		z.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	id := z.next
	z.next += 2
	return z.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: z.hbuf.Bytes(), EndStream: true, EndHeaders: true})
}

func (z *zeroWindowConn) close() {
	z.conn.(*net.TCPConn).SetLinger(0)
	z.conn.Close()
	<-z.done
}

// nonReader is an HTTP/1.1 connection with a 4 KiB receive buffer that
// sends one request and reads nothing of the answer but its first byte.
type nonReader struct {
	conn    net.Conn
	started chan error // the first byte of the answer arrived, or why not
}

// dialNonReader sends request (a whole HTTP/1.1 request) to addr and
// waits, in the background, up to 20 s for the answer's first byte.
func dialNonReader(t *testing.T, addr, request string) *nonReader {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		return errors.Join(err, serr)
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	n := &nonReader{conn: c, started: make(chan error, 1)}
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	go func() {
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, err := io.ReadFull(c, make([]byte, 1))
		n.started <- err
	}()
	return n
}

func (n *nonReader) close() {
	n.conn.(*net.TCPConn).SetLinger(0)
	n.conn.Close()
}

// startedWithin counts the non-readers whose answer began within d.
func startedWithin(readers []*nonReader, d time.Duration) int {
	deadline := time.After(d)
	started := 0
	for _, r := range readers {
		select {
		case err := <-r.started:
			if err == nil {
				started++
			}
		case <-deadline:
			return started
		}
	}
	return started
}

// stallFixture is the files of the stalled-client tests: stall.bin, whose
// stallRanges distinct ranges (16 KiB and 80 KiB in turn, each at the
// start of its own stallSpacing, so that no read or readahead of one
// brings in the next) are asked by clients that never read; ring.bin
// (1 MiB), asked whole by non-readers; and the probes, probe16k.bin and
// probe8m.bin.
const (
	stallRanges  = 300
	stallSpacing = 160 << 10
)

func stallFixture(t *testing.T) (string, map[string][]byte) {
	t.Helper()
	sizes := map[string]int{"/stall.bin": stallRanges * stallSpacing, "/ring.bin": 1 << 20, "/probe16k.bin": 16 << 10, "/probe8m.bin": 8 << 20}
	files := map[string][]byte{}
	for name, size := range sizes {
		b := make([]byte, size)
		rand.NewChaCha8([32]byte{byte(size), byte(size >> 8), byte(size >> 16), byte(size >> 24), name[1]}).Read(b)
		files[name] = b
	}
	return evictedTree(t, "coldstall", files), files
}

// stallRange is the Range header of the i-th stalled client of stall.bin.
func stallRange(i int) string {
	n := 16 << 10
	if i%2 == 1 {
		n = 80 << 10
	}
	return fmt.Sprintf("bytes=%d-%d", i*stallSpacing, i*stallSpacing+n-1)
}

// coldProbe evicts name and fetches it with c, within 10 s: whether it
// came whole and exact, and how long it took.
func coldProbe(t *testing.T, c *http.Client, root, base, name string, want []byte, proto int) (time.Duration, error) {
	t.Helper()
	if err := prewarm.Evict(filepath.Join(root, name)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, err := c.Get(base + name)
	if err != nil {
		return time.Since(start), err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	took := time.Since(start)
	switch {
	case err != nil:
		return took, fmt.Errorf("%d bytes, then %w", len(got), err)
	case resp.StatusCode != 200 || !bytes.Equal(got, want):
		return took, fmt.Errorf("status %d, %d bytes (exact: %v)", resp.StatusCode, len(got), bytes.Equal(got, want))
	case resp.ProtoMajor != proto:
		return took, fmt.Errorf("answered over %s, want HTTP/%d", resp.Proto, proto)
	}
	return took, nil
}

// probeClients are a fresh HTTP/1.1 client and a fresh h2c client, each
// giving up after 10 s: a probe that hangs fails instead of the test.
func probeClients() (h1, h2 *http.Client) {
	var p1, p2 http.Protocols
	p1.SetHTTP1(true)
	p2.SetUnencryptedHTTP2(true)
	h1 = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Protocols: &p1, DisableKeepAlives: true}}
	h2 = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Protocols: &p2}}
	return h1, h2
}

// TestColdProbeAnsweredWhileClientsStall: 300 HTTP/2 streams at a zero
// window, each asking for its own cold range (small and large bodies),
// and 300 HTTP/1.1 clients that never read, asking a body that every
// read goes through the ring for (transmit io_uring), stall 600 responses
// in their writes to the client. Meanwhile a cold 16 KiB file and a cold
// 8 MiB file are still answered whole over HTTP/1.1 and HTTP/2: what a
// stalled response holds is its own, not a share of the cold reads'
// budget. Then the stalled clients leave, and the goroutines, the
// descriptors, the ring's operations and the budget come back.
func TestColdProbeAnsweredWhileClientsStall(t *testing.T) {
	root, files := stallFixture(t)
	autoPort, ringPort := freePort(t), freePort(t)
	loadCaddyfile(t, caddyGlobals{protocols: "h1 h2c", wrappers: []string{"test_sndbuf"}}.text(t)+
		siteBlock(autoPort, root, flashServe("stat_workers 8"))+
		siteBlock(ringPort, root, flashServe("transmit io_uring", "stat_workers 8")))
	if ok, err := sharedRing(t); !ok {
		t.Fatalf("io_uring should work on this kernel: %v", err)
	}
	autoAddr, ringAddr := fmt.Sprintf("127.0.0.1:%d", autoPort), fmt.Sprintf("127.0.0.1:%d", ringPort)
	autoBase := "http://" + autoAddr
	h1, h2 := probeClients()
	// The files' descriptors belong in the baseline: open them, then
	// evict what the opens read.
	for name := range files {
		for _, base := range []string{autoBase, "http://" + ringAddr} {
			if resp, err := h1.Head(base + name); err == nil {
				resp.Body.Close()
			}
		}
		if err := prewarm.Evict(filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	h2.CloseIdleConnections()
	base := settledResources(t)

	// 300 streams on two connections (the server takes 250 at once on
	// one), each for its own cold range of stall.bin.
	var zs []*zeroWindowConn
	for i := range stallRanges {
		if i%(stallRanges/2) == 0 {
			zs = append(zs, dialZeroWindow(t, autoAddr))
		}
		if err := zs[len(zs)-1].get("/stall.bin", "range", stallRange(i)); err != nil {
			t.Fatal(err)
		}
	}
	var readers []*nonReader
	for range 300 {
		readers = append(readers, dialNonReader(t, ringAddr, "GET /ring.bin HTTP/1.1\r\nHost: "+ringAddr+"\r\n\r\n"))
	}
	defer func() {
		for _, z := range zs {
			z.close()
		}
		for _, r := range readers {
			r.close()
		}
	}()
	h1Started := startedWithin(readers, 15*time.Second)
	h2Started := func() (n int64) {
		for _, z := range zs {
			n += z.headers.Load()
		}
		return n
	}
	waitUntil(10*time.Second, func() bool { return h2Started() == stallRanges })
	var resets int64
	for _, z := range zs {
		resets += z.resets.Load()
	}
	t.Logf("stalled: %d of %d HTTP/2 responses begun (%d streams reset), %d of %d HTTP/1.1; cold chunks lent %d, ring operations %d; goroutines %d (baseline %d)",
		h2Started(), stallRanges, resets, h1Started, len(readers), ringtest.ColdChunksLent(), ringBusy(), runtime.NumGoroutine(), base.goroutines)
	if h2Started() < stallRanges || h1Started < len(readers) {
		t.Errorf("only %d of %d HTTP/2 and %d of %d HTTP/1.1 stalled responses began: the others wait behind them",
			h2Started(), stallRanges, h1Started, len(readers))
	}

	for _, p := range []struct {
		name  string
		c     *http.Client
		proto int
	}{{"/probe16k.bin", h1, 1}, {"/probe16k.bin", h2, 2}, {"/probe8m.bin", h1, 1}, {"/probe8m.bin", h2, 2}} {
		took, err := coldProbe(t, p.c, root, autoBase, p.name, files[p.name], p.proto)
		t.Logf("cold %s over HTTP/%d with 600 stalled responses: %v, %v", p.name, p.proto, took, err)
		if err != nil {
			t.Errorf("cold %s over HTTP/%d while 600 responses stall: %v", p.name, p.proto, err)
		}
	}
	h2.CloseIdleConnections()

	for _, z := range zs {
		z.close()
	}
	for _, r := range readers {
		r.close()
	}
	zs, readers = nil, nil
	if !waitUntil(20*time.Second, func() bool { return ringBusy() == 0 && ringtest.ColdChunksLent() == 0 }) {
		t.Errorf("after the stalled clients left: %d ring operations, %d cold chunks lent", ringBusy(), ringtest.ColdChunksLent())
	}
	backToBaseline(t, base, base.threads+16)
}

// ringBusy is the shared ring's operations in flight.
func ringBusy() int {
	ops, _ := ringtest.Busy()
	return ops
}

// heapInUse is the heap's live bytes after two collections (the second
// empties the pools' victim caches).
func heapInUse() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// perStalledMax is the most heap one stalled response behind encode may
// hold, on top of the connection's own (net/http's buffers, the h2
// stream): its copy buffer (32 KiB, io.Copy's, as file_server's) and
// small change, far below a cold read's 256 KiB chunk.
const perStalledMax = 128 << 10

// TestNonReadersBehindEncodeHoldLittle: behind encode (a writer that
// makes the body leave as file_server writes it), 200 HTTP/1.1 clients
// that never read and 150 HTTP/2 streams at a zero window, all asking for
// a file that every read goes through the ring for, each hold less than
// perStalledMax of heap while they stall, and a cold file is still
// answered beside them; then everything comes back.
func TestNonReadersBehindEncodeHoldLittle(t *testing.T) {
	root, files := stallFixture(t)
	port := freePort(t)
	loadCaddyfile(t, caddyGlobals{protocols: "h1 h2c", wrappers: []string{"test_sndbuf"}}.text(t)+
		siteBlock(port, root, "encode gzip", flashServe("transmit io_uring", "stat_workers 8")))
	if ok, err := sharedRing(t); !ok {
		t.Fatalf("io_uring should work on this kernel: %v", err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	h1, h2 := probeClients()
	for name := range files {
		if resp, err := h1.Head("http://" + addr + name); err == nil {
			resp.Body.Close()
		}
	}
	base := settledResources(t)
	heap0 := heapInUse()

	const h1Readers, h2Streams = 200, 150
	var readers []*nonReader
	for range h1Readers {
		readers = append(readers, dialNonReader(t, addr, "GET /probe8m.bin HTTP/1.1\r\nHost: "+addr+"\r\nAccept-Encoding: gzip\r\n\r\n"))
	}
	z := dialZeroWindow(t, addr)
	for range h2Streams {
		if err := z.get("/probe8m.bin", "accept-encoding", "gzip"); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		if z != nil {
			z.close()
		}
		for _, r := range readers {
			r.close()
		}
	}()
	h1Started := startedWithin(readers, 15*time.Second)
	waitUntil(10*time.Second, func() bool { return z.headers.Load() == h2Streams })
	if h1Started < h1Readers || z.headers.Load() < h2Streams {
		t.Fatalf("only %d of %d HTTP/1.1 and %d of %d HTTP/2 responses began", h1Started, h1Readers, z.headers.Load(), h2Streams)
	}
	// Every response is as far as it goes: its goroutine waits in a write.
	time.Sleep(200 * time.Millisecond)
	grown := heapInUse() - heap0
	per := grown / (h1Readers + h2Streams)
	t.Logf("%d stalled responses behind encode: heap grew by %d KiB, %d KiB each; cold chunks lent %d",
		h1Readers+h2Streams, grown>>10, per>>10, ringtest.ColdChunksLent())
	if per > perStalledMax {
		t.Errorf("each stalled response behind encode holds %d KiB of heap, want at most %d KiB", per>>10, perStalledMax>>10)
	}
	took, err := coldProbe(t, h1, root, "http://"+addr, "/probe16k.bin", files["/probe16k.bin"], 1)
	t.Logf("cold /probe16k.bin beside them: %v, %v", took, err)
	if err != nil {
		t.Errorf("cold /probe16k.bin beside %d stalled responses behind encode: %v", h1Readers+h2Streams, err)
	}
	h2.CloseIdleConnections()
	z.close()
	for _, r := range readers {
		r.close()
	}
	z, readers = nil, nil
	if !waitUntil(20*time.Second, func() bool { return ringBusy() == 0 && ringtest.ColdChunksLent() == 0 }) {
		t.Errorf("after the clients left: %d ring operations, %d cold chunks lent", ringBusy(), ringtest.ColdChunksLent())
	}
	backToBaseline(t, base, base.threads+16)
}
