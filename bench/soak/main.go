// Command soak runs flash_serve under a bounded mixed workload and checks
// that it loses nothing: hot, cold and range requests, 404s, HEAD,
// conditional requests, clients that hang up mid-body, and config reloads
// through the admin API, all at once. Every body is checked against the
// file's hash or its known bytes, every status against the one expected,
// and the process's RSS and descriptor count must stay flat after the
// warm-up. It prints one line and exits non-zero on any failure.
//
//	go run ./bench/soak                  # 10 minutes
//	go run ./bench/soak -duration 60s    # as in CI
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/flashserve/caddy-flash-serve"
	"github.com/flashserve/caddy-flash-serve/internal/handover"
	"github.com/flashserve/caddy-flash-serve/prewarm"
)

// file is one file of the tree; its bytes follow from its id.
type file struct {
	name string
	id   int
	size int64
	sum  [32]byte
}

func contentByte(id int, off int64) byte { return byte(off*31 + int64(id)*17 ^ off>>9) }

func fill(id int, off int64, b []byte) {
	for i := range b {
		b[i] = contentByte(id, off+int64(i))
	}
}

type counters struct {
	requests, unexpected, corrupted, aborts, reloads, retried atomic.Int64
}

func main() {
	duration := flag.Duration("duration", 10*time.Minute, "how long to run")
	workers := flag.Int("workers", 8, "concurrent clients")
	verbose := flag.Bool("v", false, "print each failure")
	flag.Parse()
	if err := run(*duration, *workers, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func run(duration time.Duration, workers int, verbose bool) error {
	dir, err := os.MkdirTemp("", "flash-serve-soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	root := filepath.Join(dir, "site")
	hot, err := makeFiles(root, "hot", 100, 0, 200, 64<<10)
	if err != nil {
		return err
	}
	cold, err := makeFiles(root, "cold", 2000, 1000, 4<<10, 256<<10)
	if err != nil {
		return err
	}
	big, err := makeFiles(root, "big", 1, 9000, 64<<20, 64<<20)
	if err != nil {
		return err
	}

	port, adminPort := freePort(), freePort()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	admin := fmt.Sprintf("http://127.0.0.1:%d", adminPort)
	config := func(gen int) ([]byte, error) {
		text := fmt.Sprintf(`{
	admin 127.0.0.1:%d
	persist_config off
	storage file_system %s
	log {
		level ERROR
	}
	servers {
		listener_wrappers {
			accept_log %d
			flash_serve
		}
	}
}
http://127.0.0.1:%d {
	bind 127.0.0.1
	header X-Generation %d
	root * %s
	flash_serve {
		max_open_files 512
	}
}
`, adminPort, filepath.Join(dir, "data"), gen, port, gen, root)
		cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(text), nil)
		return cfg, err
	}
	cfg, err := config(0)
	if err != nil {
		return err
	}
	if err := caddy.Load(cfg, true); err != nil {
		return err
	}
	defer caddy.Stop()

	var c counters
	fail := func(kind *atomic.Int64, format string, args ...any) {
		kind.Add(1)
		if verbose {
			fmt.Fprintf(os.Stderr, format+"\n", args...)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 20261129))
			// From ports of its own, so that the accept log tells which
			// generation accepted each connection.
			tr := &http.Transport{MaxIdleConnsPerHost: 4, DialContext: handover.Dial}
			defer tr.CloseIdleConnections()
			cl := &http.Client{Transport: tr, Timeout: 60 * time.Second}
			for ctx.Err() == nil {
				one(ctx, cl, rng, base, port, hot, cold, big[0], &c, fail)
			}
		}()
	}

	// The background: reloads every few seconds, and the cold files evicted
	// from the page cache now and then so that they stay cold.
	wg.Add(1)
	go func() {
		defer wg.Done()
		// One connection per load: a kept one would meet the admin
		// endpoint's own handover.
		adminClient := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
		reload := time.NewTicker(max(duration/120, time.Second))
		evict := time.NewTicker(10 * time.Second)
		defer reload.Stop()
		defer evict.Stop()
		for gen := 1; ; gen++ {
			select {
			case <-ctx.Done():
				return
			case <-reload.C:
				cfg, _ := config(gen)
				resp, err := adminClient.Post(admin+"/load", "application/json", bytes.NewReader(cfg))
				if err != nil || resp.StatusCode != 200 {
					fail(&c.unexpected, "reload %d: %v", gen, err)
				} else {
					c.reloads.Add(1)
				}
				if resp != nil {
					resp.Body.Close()
				}
			case <-evict.C:
				for _, f := range cold {
					prewarm.Evict(filepath.Join(root, f.name))
				}
			}
		}
	}()

	// Samples of RSS and fds: the first fifth of the run is warm-up.
	type sample struct{ rss, fds int64 }
	var samples []sample
	tick := time.NewTicker(time.Second)
	start := time.Now()
sampling:
	for {
		select {
		case <-ctx.Done():
			break sampling
		case <-tick.C:
			samples = append(samples, sample{rssBytes(), fdCount()})
		}
	}
	tick.Stop()
	wg.Wait()
	elapsed := time.Since(start)

	warm := samples[:max(1, len(samples)/5)]
	var warmRSS, warmFDs, lastRSS, lastFDs int64
	for _, s := range warm {
		warmRSS, warmFDs = max(warmRSS, s.rss), max(warmFDs, s.fds)
	}
	for _, s := range samples[len(warm):] {
		lastRSS, lastFDs = max(lastRSS, s.rss), max(lastFDs, s.fds)
	}
	// Flat: after the warm-up, RSS grows by at most a quarter (GC timing,
	// buffer pools) and fds by at most the clients' connections.
	rssFlat := lastRSS <= warmRSS*5/4+8<<20
	fdsFlat := lastFDs <= warmFDs+int64(4*workers)
	ok := c.unexpected.Load() == 0 && c.corrupted.Load() == 0 && rssFlat && fdsFlat && c.requests.Load() > 0
	verdict := "PASS"
	if !ok {
		verdict = "FAIL"
	}
	fmt.Printf("soak: %v, %d requests (%.0f/s), %d unexpected statuses, %d corrupted bodies, %d aborts, %d reloads, "+
		"%d retried resets, peak RSS %d→%d MiB, peak fds %d→%d (warm-up→rest), %d goroutines: %s\n",
		elapsed.Round(time.Second), c.requests.Load(), float64(c.requests.Load())/elapsed.Seconds(),
		c.unexpected.Load(), c.corrupted.Load(), c.aborts.Load(), c.reloads.Load(), c.retried.Load(),
		warmRSS>>20, lastRSS>>20, warmFDs, lastFDs, runtime.NumGoroutine(), verdict)
	if !ok {
		return errors.New("failed")
	}
	return nil
}

// one makes one request of a random kind and checks its answer.
func one(ctx context.Context, cl *http.Client, rng *rand.Rand, base string, port int, hot, cold []file, big file,
	c *counters, fail func(*atomic.Int64, string, ...any)) {
	kind := rng.IntN(100)
	var f file
	switch {
	case kind < 45:
		f = hot[rng.IntN(len(hot))]
	case kind < 70:
		f = cold[rng.IntN(len(cold))]
	default:
		f = big
		if rng.IntN(3) == 0 {
			f = hot[rng.IntN(len(hot))]
		}
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/"+f.name, nil)
	want, wantStatus := int64(-1), 200
	var ranges [][2]int64
	switch {
	case kind < 70: // whole file
	case kind < 80: // one range
		s := rng.Int64N(f.size)
		e := min(f.size-1, s+rng.Int64N(256<<10))
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", s, e))
		ranges, wantStatus = [][2]int64{{s, e}}, 206
	case kind < 85: // two ranges, in order and apart
		s1 := rng.Int64N(f.size / 2)
		e1 := min(f.size/2-1, s1+rng.Int64N(4096))
		s2 := f.size/2 + rng.Int64N(f.size/2)
		e2 := min(f.size-1, s2+rng.Int64N(4096))
		if e1 < s1 {
			e1 = s1
		}
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d,%d-%d", s1, e1, s2, e2))
		ranges, wantStatus = [][2]int64{{s1, e1}, {s2, e2}}, 206
	case kind < 89: // missing
		req.URL.Path = "/missing/" + strconv.Itoa(rng.IntN(1000))
		wantStatus = 404
	case kind < 93: // HEAD
		req.Method = "HEAD"
		want = f.size
	case kind < 97: // conditional: the ETag from a HEAD, then If-None-Match
		resp, err := do(cl, mustReq(ctx, "HEAD", base+"/"+f.name), port, c)
		if err != nil {
			if ctx.Err() == nil {
				fail(&c.unexpected, "HEAD %s: %v", f.name, err)
			}
			return
		}
		resp.Body.Close()
		req.Header.Set("If-None-Match", resp.Header.Get("Etag"))
		wantStatus = 304
	default: // a client that hangs up mid-body
		resp, err := do(cl, req, port, c)
		if err != nil {
			return
		}
		io.CopyN(io.Discard, resp.Body, rng.Int64N(min(f.size, 64<<10)))
		if conn, ok := resp.Body.(interface{ Close() error }); ok {
			conn.Close()
		}
		c.aborts.Add(1)
		return
	}
	resp, err := do(cl, req, port, c)
	if err != nil {
		if ctx.Err() == nil {
			fail(&c.unexpected, "%s %s: %v", req.Method, req.URL.Path, err)
		}
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if ctx.Err() != nil {
		return
	}
	if resp.StatusCode != wantStatus {
		fail(&c.unexpected, "%s %s %q: status %d, want %d", req.Method, req.URL.Path, req.Header.Get("Range"), resp.StatusCode, wantStatus)
		return
	}
	if err != nil {
		fail(&c.corrupted, "%s %s: body: %v", req.Method, req.URL.Path, err)
		return
	}
	switch {
	case req.Method == "HEAD":
		if resp.ContentLength != want || len(body) != 0 {
			fail(&c.corrupted, "HEAD %s: length %d", f.name, resp.ContentLength)
		}
	case wantStatus == 200:
		if sha256.Sum256(body) != f.sum {
			fail(&c.corrupted, "GET %s: %d bytes, hash differs", f.name, len(body))
		}
	case wantStatus == 206 && len(ranges) == 1:
		if !checkPart(f, ranges[0], body) {
			fail(&c.corrupted, "GET %s %v: wrong bytes", f.name, ranges[0])
		}
	case wantStatus == 206:
		if !checkMultipart(f, ranges, body, resp.Header.Get("Content-Type")) {
			fail(&c.corrupted, "GET %s %v: wrong multipart body", f.name, ranges)
		}
	}
}

func mustReq(ctx context.Context, method, url string) *http.Request {
	r, _ := http.NewRequestWithContext(ctx, method, url, nil)
	return r
}

// do sends a request, and sends it again on a new connection when a
// reload's handover dropped it before any response: no server accepted its
// connection, or a generation a newer one replaced did (see
// internal/handover for what Caddy's handover can drop, and why). RFC 9110
// §9.2.2 lets a client retry a GET or HEAD. Any other error is returned,
// and counted by the caller.
func do(cl *http.Client, req *http.Request, port int, c *counters) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		// The connection the request went out on last: the transport may
		// take several (a reused one that failed, then a new one). A
		// connect that failed says so in the error, with its port.
		var mu sync.Mutex
		local := 0
		r := req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) {
				mu.Lock()
				local = i.Conn.LocalAddr().(*net.TCPAddr).Port
				mu.Unlock()
			}}))
		resp, err := cl.Do(r)
		c.requests.Add(1)
		if err == nil || attempt == 20 || req.Context().Err() != nil || !handover.IsDrop(err) {
			return resp, err
		}
		var de *handover.DialError
		mu.Lock()
		p := local
		mu.Unlock()
		switch {
		case errors.As(err, &de):
			if !errors.Is(err, syscall.ECONNRESET) {
				return resp, err // refused, or anything but the old socket's reset
			}
		case p == 0:
			return resp, err // no connection to explain the error
		default:
			if v, _ := handover.Explain(p, port); v == handover.ByNewest {
				return resp, err
			}
		}
		c.retried.Add(1)
	}
}

func checkPart(f file, r [2]int64, body []byte) bool {
	if int64(len(body)) != r[1]-r[0]+1 {
		return false
	}
	want := make([]byte, len(body))
	fill(f.id, r[0], want)
	return bytes.Equal(body, want)
}

// checkMultipart parses a multipart/byteranges body and checks each part.
func checkMultipart(f file, ranges [][2]int64, body []byte, contentType string) bool {
	_, params, err := mime.ParseMediaType(contentType)
	if err != nil || params["boundary"] == "" {
		return false
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for _, r := range ranges {
		part, err := mr.NextPart()
		if err != nil || part.Header.Get("Content-Range") != fmt.Sprintf("bytes %d-%d/%d", r[0], r[1], f.size) {
			return false
		}
		b, err := io.ReadAll(part)
		if err != nil || !checkPart(f, r, b) {
			return false
		}
	}
	_, err = mr.NextPart()
	return err == io.EOF
}

func makeFiles(root, prefix string, n, firstID int, minSize, maxSize int64) ([]file, error) {
	dir := filepath.Join(root, prefix)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(uint64(firstID), 7))
	var out []file
	buf := make([]byte, 1<<20)
	for i := range n {
		f := file{name: fmt.Sprintf("%s/%05d.bin", prefix, i), id: firstID + i, size: minSize + rng.Int64N(maxSize-minSize+1)}
		h := sha256.New()
		w, err := os.Create(filepath.Join(root, f.name))
		if err != nil {
			return nil, err
		}
		for off := int64(0); off < f.size; off += int64(len(buf)) {
			chunk := buf[:min(int64(len(buf)), f.size-off)]
			fill(f.id, off, chunk)
			h.Write(chunk)
			if _, err := w.Write(chunk); err != nil {
				return nil, err
			}
		}
		w.Sync() // so that evicting works: dirty pages stay
		w.Close()
		copy(f.sum[:], h.Sum(nil))
		out = append(out, f)
	}
	return out, nil
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.Sys)
	}
	fields := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(fields[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func fdCount() int64 {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return int64(len(ents))
}
