//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"golang.org/x/sys/unix"
)

// The clients of bench/run --abuse. They are the harness itself, run again
// with -abuse-client NAME -abuse-spec JSON (abuseClient below), so that
// bench/run pins them to the load generators' CPU as it pins wrk; each
// prints its result as one line of JSON. They speak HTTP/2 at the frame
// level where net/http cannot (a stream at a zero window), as
// TestColdProbeAnsweredWhileClientsStall's clients do.

// abuseClient runs one client and prints its result as JSON.
func abuseClient(name, spec string) {
	var (
		res any
		err error
	)
	switch name {
	case "stall":
		var s stallSpec
		if err = json.Unmarshal([]byte(spec), &s); err == nil {
			res, err = runStall(s)
		}
	case "encode":
		var s encodeSpec
		if err = json.Unmarshal([]byte(spec), &s); err == nil {
			res, err = runEncode(s)
		}
	case "reload":
		var s reloadSpec
		if err = json.Unmarshal([]byte(spec), &s); err == nil {
			res, err = runReloads(s)
		}
	case "fdlimit":
		var s fdSpec
		if err = json.Unmarshal([]byte(spec), &s); err == nil {
			res, err = runFDLimit(s)
		}
	default:
		err = fmt.Errorf("no abuse client %q", name)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	json.NewEncoder(os.Stdout).Encode(res)
}

// runAbuseClient runs the client name with spec pinned to CPU 1 and
// decodes its result into res.
func runAbuseClient(timeout time.Duration, name string, spec, res any) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	out, err := loadgen(timeout, self, "-abuse-client", name, "-abuse-spec", string(raw))
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if json.Unmarshal(sc.Bytes(), res) == nil {
			return nil
		}
	}
	return fmt.Errorf("abuse client %s printed %q", name, out)
}

// evictFile drops one file from the page cache (POSIX_FADV_DONTNEED):
// only the files a scenario reads, not the machine's whole cache.
func evictFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// zeroWindowConn is an h2c connection whose client advertised an initial
// stream window of 0 and never sends a WINDOW_UPDATE: every response body
// asked for on it waits in the server's Write for as long as the
// connection lasts.
type zeroWindowConn struct {
	conn    net.Conn
	fr      *http2.Framer
	host    string
	next    uint32
	headers atomic.Int64 // response HEADERS received: bodies the server began
	resets  atomic.Int64
	hbuf    bytes.Buffer
	enc     *hpack.Encoder
	done    chan struct{}
}

func dialZeroWindow(addr string) (*zeroWindowConn, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	z := &zeroWindowConn{conn: c, fr: http2.NewFramer(c, c), host: addr, next: 1, done: make(chan struct{})}
	z.enc = hpack.NewEncoder(&z.hbuf)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		c.Close()
		return nil, err
	}
	if err := z.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		c.Close()
		return nil, err
	}
	for {
		f, err := z.fr.ReadFrame()
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("h2c handshake with %s: %w", addr, err)
		}
		if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
			if err := z.fr.WriteSettingsAck(); err != nil {
				c.Close()
				return nil, err
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
	return z, nil
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
	started chan error
}

func dialNonReader(addr, request string) (*nonReader, error) {
	d := net.Dialer{Timeout: 10 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		return errors.Join(err, serr)
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	n := &nonReader{conn: c, started: make(chan error, 1)}
	if _, err := io.WriteString(c, request); err != nil {
		c.Close()
		return nil, err
	}
	go func() {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err := io.ReadFull(c, make([]byte, 1))
		n.started <- err
	}()
	return n, nil
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

// rssSampler records the peak RSS of a process until stopped.
type rssSampler struct {
	stop, done chan struct{}
	peakKB     int
}

func sampleRSS(pid int) *rssSampler {
	s := &rssSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(25 * time.Millisecond)
		defer t.Stop()
		for {
			_, kb := procStatus(pid)
			s.peakKB = max(s.peakKB, kb)
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *rssSampler) finish() int {
	close(s.stop)
	<-s.done
	return s.peakKB
}

// stallSpacing is how far apart the stalled ranges of stall.bin start, so
// that no read or readahead of one brings the next into the page cache.
const stallSpacing = 160 << 10

// stallRange is the Range header of the i-th stalled HTTP/2 stream: 16
// and 80 KiB in turn, each at the start of its own stallSpacing.
func stallRange(i int) string {
	n := 16 << 10
	if i%2 == 1 {
		n = 80 << 10
	}
	return fmt.Sprintf("bytes=%d-%d", i*stallSpacing, i*stallSpacing+n-1)
}

// stallSpec is scenario 1: Streams HTTP/2 streams at a zero window (150 to
// a connection) each asking its own cold range of /stall.bin on Auto, and
// Readers HTTP/1.1 non-readers of /ring.bin on Ring; then Rounds cold
// probes of each of Probes over HTTP/1.1 and h2c on Auto, each probe's
// file evicted first.
type stallSpec struct {
	Auto, Ring, Root string
	Streams, Readers int
	Probes           []string
	Rounds           int
	PID              int
	// Settle is how long the stalled responses are left before the RSS
	// is read.
	Settle time.Duration
}

type probeFigures struct {
	Path, Proto      string
	P50, P99, MaxMS  float64
	Failures, Rounds int
	FirstError       string
}

type stallResult struct {
	H2Begun, H2Reset, H1Begun int
	RSSIdleKB, RSSStalledKB   int
	RSSPeakKB                 int
	Probes                    []probeFigures
}

// probeClients are a fresh HTTP/1.1 client (a new connection for each
// probe) and an h2c client, each giving up after 10 s.
func probeClients() (h1, h2 *http.Client) {
	var p1, p2 http.Protocols
	p1.SetHTTP1(true)
	p2.SetUnencryptedHTTP2(true)
	h1 = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Protocols: &p1, DisableKeepAlives: true}}
	h2 = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Protocols: &p2}}
	return h1, h2
}

// coldProbe evicts path's file and fetches it whole with c, checking its
// size and protocol.
func coldProbe(c *http.Client, root, base, path string, proto int) (time.Duration, error) {
	file := filepath.Join(root, path)
	fi, err := os.Stat(file)
	if err != nil {
		return 0, err
	}
	if err := evictFile(file); err != nil {
		return 0, err
	}
	start := time.Now()
	resp, err := c.Get(base + path)
	if err != nil {
		return time.Since(start), err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	switch {
	case err != nil:
		return took, fmt.Errorf("%d bytes, then %w", n, err)
	case resp.StatusCode != 200 || n != fi.Size():
		return took, fmt.Errorf("status %d, %d of %d bytes", resp.StatusCode, n, fi.Size())
	case resp.ProtoMajor != proto:
		return took, fmt.Errorf("answered over %s, want HTTP/%d", resp.Proto, proto)
	}
	return took, nil
}

func percentile(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[int(p*float64(len(s)-1)+0.5)]) / float64(time.Millisecond)
}

func runStall(s stallSpec) (stallResult, error) {
	var res stallResult
	h1, h2 := probeClients()
	for _, p := range s.Probes {
		evictFile(filepath.Join(s.Root, p))
	}
	for _, name := range []string{"stall.bin", "ring.bin"} {
		if err := evictFile(filepath.Join(s.Root, name)); err != nil {
			return res, err
		}
	}
	_, res.RSSIdleKB = procStatus(s.PID)
	peak := sampleRSS(s.PID)
	var zs []*zeroWindowConn
	var readers []*nonReader
	defer func() {
		for _, z := range zs {
			z.close()
		}
		for _, r := range readers {
			r.close()
		}
	}()
	// At most 150 streams on a connection: the server takes 250 at once.
	for i := range s.Streams {
		if i%150 == 0 {
			z, err := dialZeroWindow(s.Auto)
			if err != nil {
				return res, err
			}
			zs = append(zs, z)
		}
		if err := zs[len(zs)-1].get("/stall.bin", "range", stallRange(i)); err != nil {
			return res, err
		}
	}
	for range s.Readers {
		r, err := dialNonReader(s.Ring, "GET /ring.bin HTTP/1.1\r\nHost: "+s.Ring+"\r\n\r\n")
		if err != nil {
			return res, err
		}
		readers = append(readers, r)
	}
	res.H1Begun = startedWithin(readers, 15*time.Second)
	begun := func() (n int64) {
		for _, z := range zs {
			n += z.headers.Load()
		}
		return n
	}
	for deadline := time.Now().Add(10 * time.Second); begun() < int64(s.Streams) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	res.H2Begun = int(begun())
	for _, z := range zs {
		res.H2Reset += int(z.resets.Load())
	}
	time.Sleep(s.Settle) // every stalled response as far as it goes
	_, res.RSSStalledKB = procStatus(s.PID)
	for _, path := range s.Probes {
		for _, c := range []struct {
			proto  string
			n      int
			client *http.Client
		}{{"h1", 1, h1}, {"h2", 2, h2}} {
			f := probeFigures{Path: path, Proto: c.proto, Rounds: s.Rounds}
			var ds []time.Duration
			for range s.Rounds {
				took, err := coldProbe(c.client, s.Root, "http://"+s.Auto, path, c.n)
				if err != nil {
					f.Failures++
					if f.FirstError == "" {
						f.FirstError = err.Error()
					}
					took = 10 * time.Second
				}
				ds = append(ds, took)
			}
			f.P50, f.P99, f.MaxMS = percentile(ds, .5), percentile(ds, .99), percentile(ds, 1)
			res.Probes = append(res.Probes, f)
		}
	}
	h2.CloseIdleConnections()
	res.RSSPeakKB = peak.finish()
	return res, nil
}

// encodeSpec is scenario 2: N HTTP/1.1 non-readers asking Path with
// Accept-Encoding: gzip on Addr, the file evicted first.
type encodeSpec struct {
	Addr, Path, File string
	N, PID           int
	Settle           time.Duration // after the last began, before the RSS is read
}

type encodeResult struct {
	Started                         int
	RSSBeforeKB, RSSAfterKB, PeakKB int
}

func runEncode(s encodeSpec) (encodeResult, error) {
	var res encodeResult
	if err := evictFile(s.File); err != nil {
		return res, err
	}
	_, res.RSSBeforeKB = procStatus(s.PID)
	peak := sampleRSS(s.PID)
	var readers []*nonReader
	defer func() {
		for _, r := range readers {
			r.close()
		}
	}()
	for range s.N {
		r, err := dialNonReader(s.Addr, "GET "+s.Path+" HTTP/1.1\r\nHost: "+s.Addr+"\r\nAccept-Encoding: gzip\r\n\r\n")
		if err != nil {
			return res, err
		}
		readers = append(readers, r)
	}
	res.Started = startedWithin(readers, 30*time.Second)
	time.Sleep(s.Settle)
	_, res.RSSAfterKB = procStatus(s.PID)
	res.PeakKB = peak.finish()
	return res, nil
}

// reloadSpec is scenario 4: Configs (JSON files, generation 1 first, the
// one the server started with) loaded one after the other through the
// admin API at Admin (POST /load) while H1 HTTP/1.1 and H2 h2c clients
// fetch Paths from Addrs and check every body against Root. Before the
// next reload, each generation serves for MinLife and answers both
// protocols at least 4 times (its X-Generation header).
type reloadSpec struct {
	Admin   string
	Configs []string
	Addrs   []string
	Root    string
	Paths   []string
	H1, H2  int
	MinLife time.Duration
}

type reloadResult struct {
	Reloads, Responses       int
	Status5xx, Cut, Wrong    int
	Dropped                  int
	ByStatus                 map[string]int
	FirstFailure, ReloadFail string
}

// reloadTally counts what the clients saw.
type reloadTally struct {
	mu                  sync.Mutex
	byGen               map[string]int // proto + generation → responses
	byStatus            map[string]int
	status5xx, cut, bad int
	dropped             int
	first               string
}

func (tl *reloadTally) note(format string, args ...any) {
	if tl.first == "" {
		tl.first = fmt.Sprintf(format, args...)
	}
}

// check counts one response: its status, and whether its body is the
// whole file (want).
func (tl *reloadTally) check(proto, path string, resp *http.Response, body, want []byte, err error) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.byStatus[strconv.Itoa(resp.StatusCode)]++
	switch {
	case resp.StatusCode >= 500:
		tl.status5xx++
		tl.note("%s %s: status %d %q", proto, path, resp.StatusCode, body)
	case err != nil:
		tl.cut++
		tl.note("%s %s: body cut after %d bytes: %v", proto, path, len(body), err)
	case resp.StatusCode != 200 || !bytes.Equal(body, want):
		tl.bad++
		tl.note("%s %s: status %d, %d bytes; want 200 and %d exact bytes", proto, path, resp.StatusCode, len(body), len(want))
	default:
		tl.byGen[proto+resp.Header.Get("X-Generation")]++
	}
}

func (tl *reloadTally) servedBy(proto string, gen int) int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.byGen[proto+strconv.Itoa(gen)]
}

// h1ReloadClient is an HTTP/1.1 client on one keep-alive connection at a
// time, which tells a connection closed before any byte of its response
// (what a reload may drop: the request is sent again) from a response cut
// short.
type h1ReloadClient struct {
	addr string
	conn net.Conn
	br   *bufio.Reader
	read int
}

func (c *h1ReloadClient) Read(p []byte) (int, error) {
	n, err := c.conn.Read(p)
	c.read += n
	return n, err
}

func (c *h1ReloadClient) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

func (c *h1ReloadClient) get(path string, gzipped bool) (resp *http.Response, body []byte, dropped bool, err error) {
	if c.conn == nil {
		conn, err := net.DialTimeout("tcp", c.addr, 10*time.Second)
		if err != nil {
			return nil, nil, true, err
		}
		c.conn = conn
		c.br = bufio.NewReader(c)
	}
	c.conn.SetDeadline(time.Now().Add(30 * time.Second))
	c.read = 0
	ae := ""
	if gzipped {
		ae = "Accept-Encoding: gzip\r\n"
	}
	if _, err = fmt.Fprintf(c.conn, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\n", path, ae); err == nil {
		_, err = c.br.Peek(1)
	}
	if err == nil {
		resp, err = http.ReadResponse(c.br, nil)
	}
	if err != nil {
		c.close()
		if c.read == 0 {
			return nil, nil, true, err
		}
		return &http.Response{}, nil, false, err
	}
	body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.Close {
		c.close()
	}
	return resp, body, false, err
}

func newH2ReloadClient() (*http.Transport, *http.Client) {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protos, DisableCompression: true, ResponseHeaderTimeout: 5 * time.Second}
	return tr, &http.Client{Timeout: 30 * time.Second, Transport: tr}
}

// reloadWant is the body of path in root: a directory's index file
// (index.html, else index.txt, as Caddy's index default), the gzip sidecar
// when asked with gzip and one exists.
func reloadWant(root, path string, gzipped bool) []byte {
	p := filepath.Join(root, filepath.FromSlash(path))
	if strings.HasSuffix(path, "/") {
		if _, err := os.Stat(filepath.Join(p, "index.html")); err == nil {
			p = filepath.Join(p, "index.html")
		} else {
			p = filepath.Join(p, "index.txt")
		}
	}
	if gzipped {
		if b, err := os.ReadFile(p + ".gz"); err == nil {
			return b
		}
	}
	b, _ := os.ReadFile(p)
	return b
}

func runReloads(s reloadSpec) (reloadResult, error) {
	res := reloadResult{ByStatus: map[string]int{}}
	tl := &reloadTally{byGen: map[string]int{}, byStatus: res.ByStatus}
	want := map[string][]byte{}
	for _, p := range s.Paths {
		want[p+" 0"], want[p+" 1"] = reloadWant(s.Root, p, false), reloadWant(s.Root, p, true)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range s.H1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &h1ReloadClient{addr: s.Addrs[w%len(s.Addrs)]}
			defer c.close()
			for i := w * 37; ctx.Err() == nil; i++ {
				path, gz := s.Paths[i%len(s.Paths)], i%3 == 0
				for attempt := 0; ctx.Err() == nil; attempt++ {
					resp, body, dropped, err := c.get(path, gz)
					if dropped {
						tl.mu.Lock()
						tl.dropped++
						tl.mu.Unlock()
						if attempt > 0 {
							time.Sleep(10 * time.Millisecond)
						}
						continue
					}
					tl.check("h1", path, resp, body, want[fmt.Sprint(path, " ", b2i(gz))], err)
					break
				}
			}
		}()
	}
	for w := range s.H2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr, c := newH2ReloadClient()
			defer func() { tr.CloseIdleConnections() }()
			for i := w * 53; ctx.Err() == nil; i++ {
				path, gz := s.Paths[i%len(s.Paths)], i%3 == 1
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+s.Addrs[w%len(s.Addrs)]+path, nil)
				if gz {
					req.Header.Set("Accept-Encoding", "gzip")
				}
				resp, err := c.Do(req)
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					// No response headers: a stream the old server never
					// took (its GOAWAY, a connection it closed). Sent
					// again on a new connection.
					tl.mu.Lock()
					tl.dropped++
					tl.mu.Unlock()
					tr.CloseIdleConnections()
					tr, c = newH2ReloadClient()
					continue
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if ctx.Err() != nil {
					return
				}
				if resp.ProtoMajor != 2 {
					tl.mu.Lock()
					tl.bad++
					tl.note("h2c %s: answered over %s", path, resp.Proto)
					tl.mu.Unlock()
					continue
				}
				tl.check("h2", path, resp, body, want[fmt.Sprint(path, " ", b2i(gz))], err)
			}
		}()
	}
	admin := &http.Client{Timeout: 60 * time.Second}
	for i, conf := range s.Configs[1:] {
		gen := i + 2
		raw, err := os.ReadFile(conf)
		if err != nil {
			cancel()
			wg.Wait()
			return res, err
		}
		resp, err := admin.Post("http://"+s.Admin+"/load", "application/json", bytes.NewReader(raw))
		if err == nil {
			msg, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				err = fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(msg))
			}
		}
		if err != nil {
			res.ReloadFail = fmt.Sprintf("reload %d: %v", gen-1, err)
			break
		}
		res.Reloads++
		// Each generation serves for a while, at least MinLife, and
		// answers both protocols before the next reload.
		time.Sleep(s.MinLife)
		deadline := time.Now().Add(30 * time.Second)
		for tl.servedBy("h1", gen) < 4 || tl.servedBy("h2", gen) < 4 {
			if time.Now().After(deadline) {
				res.ReloadFail = fmt.Sprintf("generation %d answered h1 %d and h2 %d times in 30 s", gen, tl.servedBy("h1", gen), tl.servedBy("h2", gen))
				break
			}
			time.Sleep(time.Millisecond)
		}
		if res.ReloadFail != "" {
			break
		}
	}
	cancel()
	wg.Wait()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, n := range tl.byStatus {
		res.Responses += n
	}
	res.Status5xx, res.Cut, res.Wrong, res.Dropped, res.FirstFailure = tl.status5xx, tl.cut, tl.bad, tl.dropped, tl.first
	return res, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// fdSpec is scenario 5: Conns keep-alive connections, opened first (each
// with a request of Warm), then Requests requests of Paths at random,
// each answer checked against Root.
type fdSpec struct {
	Base, Root, Warm string
	Paths            []string
	Conns, Requests  int
	RcvBuf           int // the clients' SO_RCVBUF
}

type fdResult struct {
	Connected                int
	OK, Unavailable, NoRetry int // 200 exact; 503 with Retry-After; 503 without
	NotFound, Other, Errors  int // 404 for an existing page; any other status; no answer
	ByStatus                 map[string]int
	FirstFailure             string
}

func runFDLimit(s fdSpec) (fdResult, error) {
	res := fdResult{ByStatus: map[string]int{}}
	// A small receive buffer keeps each file's answer in flight (and its
	// descriptor open) while the client reads it: the connections'
	// descriptors and the answers' together press on the limit.
	d := net.Dialer{Timeout: 10 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, s.RcvBuf)
		})
		return errors.Join(err, serr)
	}}
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		DialContext: d.DialContext, MaxIdleConnsPerHost: s.Conns, MaxConnsPerHost: s.Conns, DisableCompression: true,
	}}
	defer client.CloseIdleConnections()
	want := map[string][]byte{}
	for _, p := range s.Paths {
		want[p] = reloadWant(s.Root, p, false)
	}
	// The connections first, all at once, each held until all have their
	// answer: a server whose fd table stays full cannot accept one.
	var got, wg sync.WaitGroup
	var connected atomic.Int64
	got.Add(s.Conns)
	for range s.Conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Get(s.Base + s.Warm)
			got.Done()
			if err != nil {
				return
			}
			got.Wait()
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			connected.Add(1)
		}()
	}
	wg.Wait()
	res.Connected = int(connected.Load())
	var mu sync.Mutex
	var next atomic.Int64
	for w := range s.Conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 5))
			for next.Add(1) <= int64(s.Requests) {
				p := s.Paths[rng.IntN(len(s.Paths))]
				resp, err := client.Get(s.Base + p)
				var body []byte
				if err == nil {
					body, err = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				mu.Lock()
				fail := ""
				switch {
				case err != nil:
					res.Errors++
					fail = err.Error()
				case resp.StatusCode == 200 && bytes.Equal(body, want[p]):
					res.OK++
				case resp.StatusCode == 503 && resp.Header.Get("Retry-After") != "":
					res.Unavailable++
				case resp.StatusCode == 503:
					res.NoRetry++
					fail = "503 without Retry-After"
				case resp.StatusCode == 404:
					res.NotFound++
					fail = "404"
				default:
					res.Other++
					fail = fmt.Sprintf("status %d, %d bytes", resp.StatusCode, len(body))
				}
				if err == nil {
					res.ByStatus[strconv.Itoa(resp.StatusCode)]++
				}
				if fail != "" && res.FirstFailure == "" {
					res.FirstFailure = p + ": " + fail
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return res, nil
}
