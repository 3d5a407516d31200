package flashserve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flashserve/caddy-flash-serve/transmit"
)

// engineSites starts one Caddy with a flash_serve site per engine, all
// behind the listener wrapper, each with its own access log.
type engineSites struct {
	root  string
	base  map[string]string // engine → http://127.0.0.1:port
	logs  map[string]string // engine → access log path
	files map[string][]byte
}

var engines = []string{transmit.PolicyAuto, transmit.PolicySendfile, transmit.PolicyCopy, transmit.PolicyIOUring}

// sniffLen is what net/http copies through its own buffer before it
// hands a body's ReadFrom to the connection: those bytes never leave
// with sendfile.
const sniffLen = 512

func startEngineSites(t *testing.T) *engineSites {
	t.Helper()
	s := &engineSites{base: map[string]string{}, logs: map[string]string{}, files: map[string][]byte{}}
	rng := rand.New(rand.NewPCG(7, 7))
	// In a fixed order: the same seed must give every name the same bytes.
	for _, f := range []struct {
		name string
		size int
	}{{"tiny.txt", 700}, {"small.bin", 3000}, {"medium.bin", 100 << 10}, {"large.bin", 3<<20 + 17}} {
		b := make([]byte, f.size)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		s.files["/"+f.name] = b
	}
	// Another user's files with FLASHSERVE_TEST_FOREIGN_DIR (see testDir).
	s.root = testDir(t, "engines", func(dir string) {
		for name, b := range s.files {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	})
	logDir := t.TempDir()
	var sites strings.Builder
	for _, e := range engines {
		port := freePort(t)
		s.base[e] = fmt.Sprintf("http://127.0.0.1:%d", port)
		s.logs[e] = filepath.Join(logDir, e+".log")
		sites.WriteString(siteBlock(port, s.root, flashServe("transmit "+e), block("log", "output file "+s.logs[e], "format json")))
	}
	loadSites(t, "", sites.String())
	return s
}

// accessSizes reads the "size" of every access log entry for a URI.
func accessSizes(t *testing.T, path, uri string) []int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var sizes []int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Request struct{ URI string } `json:"request"`
			Size    int64                `json:"size"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Request.URI == uri {
			sizes = append(sizes, line.Size)
		}
	}
	return sizes
}

func TestEnginesByteExactWithKeepAlive(t *testing.T) {
	s := startEngineSites(t)
	ranges := []string{"", "bytes=0-0", "bytes=1000-", "bytes=-513", "bytes=5-70000", "bytes=0-9,100-199,5000-6000", "bytes=20-29,0-9"}
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			tr := &http.Transport{MaxConnsPerHost: 1, DisableCompression: true}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
			requests, reused := 0, 0
			var expectSizes = map[string][]int64{}
			for uri, content := range s.files {
				for _, rg := range ranges {
					req, _ := http.NewRequest("GET", s.base[engine]+uri, nil)
					if rg != "" {
						req.Header.Set("Range", rg)
					}
					req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
						GotConn: func(info httptrace.GotConnInfo) {
							if info.Reused {
								reused++
							}
						},
					}))
					resp, err := client.Do(req)
					if err != nil {
						t.Fatalf("%s %s: %v", uri, rg, err)
					}
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil {
						t.Fatalf("%s %s: reading body: %v", uri, rg, err)
					}
					requests++
					pr := parityRequest{method: "GET", target: uri, header: req.Header}
					fx := &fixture{byETag: map[string][]byte{resp.Header.Get("Etag"): content}}
					if err := fx.checkBody(pr, parityResponse{status: resp.StatusCode, header: resp.Header, body: body}); err != nil {
						t.Fatalf("%s %s: %v", uri, rg, err)
					}
					switch {
					case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && rg == "bytes=1000-" && len(content) <= 1000:
					case resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusPartialContent:
						t.Fatalf("%s %s: status %d", uri, rg, resp.StatusCode)
					}
					expectSizes[uri] = append(expectSizes[uri], int64(len(body)))
				}
			}
			if reused != requests-1 {
				t.Fatalf("%d of %d requests reused the connection; keep-alive was lost", reused, requests)
			}
			// The access log's size is the body bytes, whatever the engine.
			// The entry is written after the response, so wait for it.
			for uri, want := range expectSizes {
				eventually(t, 10*time.Second, func() error {
					got := accessSizes(t, s.logs[engine], uri)
					if fmt.Sprint(got) == fmt.Sprint(want) {
						return nil
					}
					err := fmt.Errorf("access log sizes for %s: %v, want %v", uri, got, want)
					if len(got) >= len(want) { // all the entries, some wrong: waiting will not help
						t.Fatal(err)
					}
					return err
				})
			}
		})
	}
}

func TestTruncatedFileAbortsTheConnection(t *testing.T) {
	s := startEngineSites(t)
	for _, engine := range []string{transmit.PolicySendfile, transmit.PolicyCopy} {
		t.Run(engine, func(t *testing.T) {
			name := "shrinking-" + engine + ".bin"
			p := filepath.Join(s.root, name)
			content := bytes.Repeat([]byte("0123456789abcdef"), 4<<20) // 64 MiB
			if err := os.WriteFile(p, content, 0o644); err != nil {
				t.Fatal(err)
			}
			conn, err := net.Dial("tcp", strings.TrimPrefix(s.base[engine], "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "GET /%s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", name)
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			// Read a little, truncate the file, then read what comes.
			head := make([]byte, 1<<20)
			if _, err := io.ReadFull(resp.Body, head); err != nil {
				t.Fatalf("status %d, %v: %v", resp.StatusCode, resp.Header, err)
			}
			if err := os.Truncate(p, 2<<20); err != nil {
				t.Fatal(err)
			}
			conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			rest, err := io.ReadAll(resp.Body)
			got := append(head, rest...)
			if err == nil {
				t.Fatalf("the body ended cleanly at %d bytes of %d declared; the client cannot tell it is short", len(got), resp.ContentLength)
			}
			if !bytes.Equal(got, content[:len(got)]) {
				t.Fatal("the body holds bytes that are not the file's")
			}
			if int64(len(got)) >= resp.ContentLength {
				t.Fatalf("got the whole body (%d) although the file shrank", len(got))
			}
		})
	}
}

func countPipes(t *testing.T) (fds, pipes int) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(target, "pipe:") {
			pipes++
		}
	}
	return len(ents), pipes
}

func TestAbortedTransfersLeaveNothingBehind(t *testing.T) {
	skipIfShort(t, "10,000 aborted transfers")
	s := startEngineSites(t)
	if err := os.WriteFile(filepath.Join(s.root, "abort.bin"), bytes.Repeat([]byte{'a'}, 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := map[string]string{}
	for _, e := range engines {
		addr[e] = strings.TrimPrefix(s.base[e], "http://")
	}
	// Warm up, so that the cached entries and pooled buffers exist before
	// the baseline is taken.
	for _, e := range engines {
		resp, err := http.Get(s.base[e] + "/abort.bin")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	// The baseline once the warm-up's connections are gone on the server's
	// side too.
	settledResources(t)
	fds0, pipes0 := countPipes(t)
	goroutines0 := runtime.NumGoroutine()

	aborts := 10000
	if n := os.Getenv("ABORTS"); n != "" {
		fmt.Sscan(n, &aborts)
	}
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i := range aborts {
		if ctx.Err() != nil {
			t.Fatal("aborted transfers took too long")
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, err := net.DialTimeout("tcp", addr[engines[i%len(engines)]], 5*time.Second)
			if err != nil {
				t.Error(err)
				return
			}
			fmt.Fprint(c, "GET /abort.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
			buf := make([]byte, 4096)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(c, buf); err != nil { // the headers and some of the body
				t.Errorf("reading the start of the response: %v", err)
			} else if !bytes.HasPrefix(buf, []byte("HTTP/1.1 200 OK")) {
				t.Errorf("response starts with %q", buf[:40])
			}
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0) // a reset, as a client that dies sends
			}
			c.Close()
		}()
	}
	wg.Wait()
	eventually(t, 30*time.Second, func() error {
		fds, pipes := countPipes(t)
		g := runtime.NumGoroutine()
		if fds <= fds0 && pipes <= pipes0 && g <= goroutines0+2 {
			t.Logf("after %d aborts: %d fds (%d before), %d goroutines (%d before)", aborts, fds, fds0, g, goroutines0)
			return nil
		}
		return fmt.Errorf("after %d aborts: %d fds (was %d), %d pipes (was %d), %d goroutines (was %d)",
			aborts, fds, fds0, pipes, pipes0, g, goroutines0)
	})
}

// TestMemoryBodiesWithoutDescriptorUnderEveryPolicy: a small file kept in
// memory whose descriptor the cache closed (more files than
// max_open_files) is sent from memory under every transmit policy, whole
// and as a range, byte for byte: it has no descriptor to send from, and
// reopening one would cost three system calls for bytes already here.
func TestMemoryBodiesWithoutDescriptorUnderEveryPolicy(t *testing.T) {
	root := t.TempDir()
	files := map[string][]byte{}
	rng := rand.New(rand.NewPCG(3, 3))
	for i := range 30 {
		b := make([]byte, 1000+i)
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		name := fmt.Sprintf("/f%02d.bin", i)
		files[name] = b
		if err := os.WriteFile(filepath.Join(root, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var sites strings.Builder
	base := map[string]string{}
	for _, e := range engines {
		port := freePort(t)
		base[e] = fmt.Sprintf("http://127.0.0.1:%d", port)
		sites.WriteString(siteBlock(port, root, flashServe("transmit "+e, "max_open_files 4")))
	}
	loadSites(t, "", sites.String())
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	get := func(url, rg string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		if rg != "" {
			req.Header.Set("Range", rg)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, b
	}
	for _, e := range engines {
		mem0 := counters.requests[transmit.EngineMemory].Load()
		requests := 0
		for range 2 {
			for name, want := range files {
				if code, b := get(base[e]+name, ""); code != http.StatusOK || !bytes.Equal(b, want) {
					t.Fatalf("%s %s: %d, %d bytes, want 200 and its %d bytes", e, name, code, len(b), len(want))
				}
				if code, b := get(base[e]+name, "bytes=10-19"); code != http.StatusPartialContent || !bytes.Equal(b, want[10:20]) {
					t.Fatalf("%s %s bytes=10-19: %d %q", e, name, code, b)
				}
				requests += 2
			}
		}
		mem := counterReaches(&counters.requests[transmit.EngineMemory], mem0+int64(requests)) - mem0
		t.Logf("transmit %s: %d of %d requests from memory", e, mem, requests)
		// At most 4 files of 30 have a descriptor at a time: the others'
		// second pass at least leaves from memory.
		if e == transmit.PolicyAuto && mem != int64(requests) || mem < int64(requests)/3 {
			t.Errorf("transmit %s: %d of %d requests from memory", e, mem, requests)
		}
	}
}
