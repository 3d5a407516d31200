//go:build linux

package flashserve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const (
	gib          = 1 << 30
	markerEvery  = 64 << 20
	markerLength = 4096
)

// sparseGiB makes a 1 GiB sparse file with a 4 KiB marker every 64 MiB,
// so that a body can be checked as it streams, without holding it.
func sparseGiB(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(gib); err != nil {
		t.Fatal(err)
	}
	for off := int64(0); off < gib; off += markerEvery {
		if _, err := f.WriteAt(marker(off), off); err != nil {
			t.Fatal(err)
		}
	}
}

func marker(off int64) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("%016x", off)), markerLength/16)
}

// zeroBlock is what a hole of a sparseGiB file is compared with.
var zeroBlock = make([]byte, 64<<10)

// bodyChecker verifies a sparseGiB body as it is written to it.
type bodyChecker struct {
	off int64
	bad error
}

func (c *bodyChecker) Write(p []byte) (int, error) {
	for i := 0; i < len(p) && c.bad == nil; {
		off := c.off + int64(i)
		inMarker := off%markerEvery < markerLength
		var n int
		if inMarker {
			start := off % markerEvery
			n = min(len(p)-i, int(markerLength-start))
			if !bytes.Equal(p[i:i+n], marker(off - start)[start:start+int64(n)]) {
				c.bad = fmt.Errorf("marker bytes differ at offset %d", off)
			}
		} else {
			next := (off/markerEvery + 1) * markerEvery
			n = min(len(p)-i, int(next-off))
			// Block by block: a byte loop over 1 GiB takes minutes under
			// the race detector.
			for j := i; j < i+n; j += len(zeroBlock) {
				k := min(i+n, j+len(zeroBlock))
				if !bytes.Equal(p[j:k], zeroBlock[:k-j]) {
					c.bad = fmt.Errorf("non-zero byte in a hole at offset about %d", c.off+int64(j))
					break
				}
			}
		}
		i += n
	}
	c.off += int64(len(p))
	return len(p), nil
}

// TestFileChangedDuringLargeTransfer changes the file under a 1 GiB
// transfer, with each engine that streams it. A replaced or deleted file
// is still sent whole and exact from the descriptor the transfer holds
// (the old inode lives on), and the next request sees the change; a
// truncated file aborts the connection rather than pad or send other
// bytes. Descriptors, goroutines and threads come back to baseline.
func TestFileChangedDuringLargeTransfer(t *testing.T) {
	skipIfShort(t, "six 1 GiB transfers")
	s := startEngineSites(t)
	// Warm up first: the access logs and the cache's inotify instance are
	// opened on first use, and belong in the baseline.
	warm := &http.Client{Timeout: 10 * time.Second}
	for _, e := range engines {
		get(t, warm, s.base[e]+"/tiny.txt")
	}
	warm.CloseIdleConnections()
	base := settledResources(t)
	for _, engine := range []string{engineSendfile, engineCopy} {
		for _, change := range []string{"replace", "delete", "truncate"} {
			t.Run(engine+"/"+change, func(t *testing.T) {
				name := fmt.Sprintf("big-%s-%s.bin", engine, change)
				p := filepath.Join(s.root, name)
				sparseGiB(t, p)
				conn, err := net.Dial("tcp", strings.TrimPrefix(s.base[engine], "http://"))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(2 * time.Minute))
				fmt.Fprintf(conn, "GET /%s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", name)
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != 200 || resp.ContentLength != gib {
					t.Fatalf("status %d, length %d", resp.StatusCode, resp.ContentLength)
				}
				check := &bodyChecker{}
				// Read 8 MiB, then change the file while the server is blocked
				// on the full socket.
				if _, err := io.CopyN(check, resp.Body, 8<<20); err != nil {
					t.Fatal(err)
				}
				switch change {
				case "replace":
					tmp := p + ".new"
					if err := os.WriteFile(tmp, []byte("replacement\n"), 0o644); err != nil {
						t.Fatal(err)
					}
					if err := os.Rename(tmp, p); err != nil {
						t.Fatal(err)
					}
				case "delete":
					if err := os.Remove(p); err != nil {
						t.Fatal(err)
					}
				case "truncate":
					if err := os.Truncate(p, 16<<20); err != nil {
						t.Fatal(err)
					}
				}
				n, err := io.Copy(check, resp.Body)
				total := 8<<20 + n
				if check.bad != nil {
					t.Fatalf("corrupted body: %v", check.bad)
				}
				if change == "truncate" {
					if err == nil || total >= gib {
						t.Fatalf("a truncated file gave %d bytes and %v; want a cut connection", total, err)
					}
					os.Remove(p)
					return
				}
				if err != nil || total != gib {
					t.Fatalf("got %d bytes (%v), want the whole old file", total, err)
				}
				// The next request sees the change: at once with inotify, within
				// a second without it (the portable build). HEAD, so that a poll
				// that still finds the old file does not read 1 GiB.
				c := &http.Client{Timeout: 10 * time.Second}
				waitFor(t, "the change to be seen", 3*time.Second, func() bool {
					resp, err := c.Head(s.base[engine] + "/" + name)
					if err != nil {
						return false
					}
					resp.Body.Close()
					if change == "replace" {
						return resp.StatusCode == 200 && resp.ContentLength == int64(len("replacement\n"))
					}
					return resp.StatusCode == 404
				})
				os.Remove(p)
			})
		}
	}
	backToBaseline(t, base, base.threads+8)
}

// TestFDExhaustion lowers RLIMIT_NOFILE of a running server, a child
// process, far below what it uses, and sends it cold requests from many
// connections: every answer is the file or a 503 with Retry-After, never
// another error, and once the limit is back every file is served again.
func TestFDExhaustion(t *testing.T) {
	root := t.TempDir()
	const files = 400
	for i := range files {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("f%03d.bin", i)), bytes.Repeat([]byte{byte(i)}, 20<<10), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	port, adminPort := freePort(t), freePort(t)
	cfg := filepath.Join(t.TempDir(), "Caddyfile")
	// Logs at INFO, Caddy's default: the child's log is shown on a failure.
	g := caddyGlobals{admin: fmt.Sprintf("127.0.0.1:%d", adminPort), options: []string{block("log", "level INFO")}}
	os.WriteFile(cfg, []byte(g.text(t)+siteBlock(port, root, flashServe("memory_cache 0"))), 0o644)
	child := startCaddyProcess(t, "server", cfg)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	const clients = 16
	c := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	defer c.Transport.(*http.Transport).CloseIdleConnections()
	waitFor(t, "the server", 60*time.Second, func() bool {
		resp, err := c.Get(base + "/f000.bin")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	pid := child.cmd.Process.Pid
	fdsOf := func() int {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	c.Transport.(*http.Transport).CloseIdleConnections()
	// The server's descriptors without a client and without the one file
	// it has cached, which the purge at the end closes: once the closed
	// connections are gone on the server's side too (the count stays the
	// same three times in a row), so that the baseline holds none of them.
	last := settled(fdsOf)
	baseFDs := last - 1
	var old unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &old); err != nil {
		t.Fatal(err)
	}
	// Room for the clients' connections, which a server out of descriptors
	// could not even accept, and a few more: the cache must live in those.
	low := unix.Rlimit{Cur: uint64(fdsOf() + clients + 12), Max: old.Max}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &low, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("RLIMIT_NOFILE of the server lowered to %d (it had %d fds open)", low.Cur, fdsOf())

	var ok, unavailable atomic.Int64
	var wg sync.WaitGroup
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < files; i += clients {
				resp, err := c.Get(fmt.Sprintf("%s/f%03d.bin", base, i))
				if err != nil {
					t.Errorf("f%03d: %v", i, err)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode == 200 && len(b) == 20<<10 && b[0] == byte(i):
					ok.Add(1)
				case resp.StatusCode == 503 && resp.Header.Get("Retry-After") != "":
					unavailable.Add(1)
				default:
					t.Errorf("f%03d with the fd table full: status %d, %d bytes", i, resp.StatusCode, len(b))
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("with the fd table full: %d served, %d answered 503", ok.Load(), unavailable.Load())
	if ok.Load() == 0 {
		t.Error("nothing was served: the cache should shed descriptors and go on")
	}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &old, nil); err != nil {
		t.Fatal(err)
	}
	for i := range files {
		status, _, b := get(t, c, fmt.Sprintf("%s/f%03d.bin", base, i))
		if status != 200 || len(b) != 20<<10 {
			t.Fatalf("f%03d after the limit came back: status %d", i, status)
		}
	}
	status, body := adminCall(t, "GET", fmt.Sprintf("http://127.0.0.1:%d/flash_serve/stats", adminPort), "")
	var st Stats
	if status != 200 || json.Unmarshal(body, &st) != nil {
		t.Fatalf("stats: %d %s", status, body)
	}
	t.Logf("statacc: %+v; rejected: %v", st.Statacc, st.Rejected)
	if st.Statacc.Shed == 0 {
		t.Error("the cache never met a full fd table: the test proved nothing")
	}
	// Every descriptor is accounted for: with the cache purged and the
	// clients gone, the server is back to what it had before.
	c.Transport.(*http.Transport).CloseIdleConnections()
	adminCall(t, "POST", fmt.Sprintf("http://127.0.0.1:%d/flash_serve/purge", adminPort), fmt.Sprintf(`{"prefix": %q}`, root))
	http.DefaultTransport.(*http.Transport).CloseIdleConnections() // the admin calls'
	waitFor(t, "the server's fds to come back", 10*time.Second, func() bool {
		return fdsOf() <= baseFDs
	})
}

// TestSlowReadersHoldNoThreads opens connections that ask for a large
// file and never read: the server's sends park on the netpoller, so they
// hold goroutines but no OS threads, other clients are still served, and
// when the readers go away everything is given back.
func TestSlowReadersHoldNoThreads(t *testing.T) {
	s := startEngineSites(t)
	if err := os.WriteFile(filepath.Join(s.root, "slow.bin"), bytes.Repeat([]byte("s"), 32<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	for _, e := range engines {
		// Cache both files before the baseline: the cache's descriptors
		// belong in it.
		get(t, c, s.base[e]+"/slow.bin")
		get(t, c, s.base[e]+"/tiny.txt")
	}
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	c.CloseIdleConnections()
	base := settledResources(t)
	var conns []net.Conn
	for i := range 300 {
		e := engines[i%len(engines)]
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.base[e], "http://"))
		if err != nil {
			t.Fatal(err)
		}
		// A tiny receive window, so the server's socket fills at once.
		conn.(*net.TCPConn).SetReadBuffer(4096)
		fmt.Fprint(conn, "GET /slow.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		conns = append(conns, conn)
	}
	// Every reader is being sent its body: its first byte has arrived (the
	// one byte read leaves the socket as full), and every connection's
	// goroutine exists, so that the threads are counted with all 300 sends
	// under way rather than after a guessed delay.
	for i, conn := range conns {
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.ReadFull(conn, make([]byte, 1)); err != nil {
			t.Fatalf("reader %d: no first byte: %v", i, err)
		}
	}
	waitFor(t, "a goroutine for each stalled reader", 10*time.Second, func() bool {
		return runtime.NumGoroutine() >= base.goroutines+len(conns)
	})
	during := countResources(t)
	t.Logf("with 300 stalled readers: %+v (baseline %+v)", during, base)
	if during.threads > base.threads+16 {
		t.Errorf("300 stalled readers hold %d more OS threads; sends must park on the netpoller", during.threads-base.threads)
	}
	for _, e := range engines {
		start := time.Now()
		if status, _, b := get(t, c, s.base[e]+"/tiny.txt"); status != 200 || !bytes.Equal(b, s.files["/tiny.txt"]) {
			t.Errorf("%s: another client got %d while readers stalled", e, status)
		}
		t.Logf("%s: another client served in %v", e, time.Since(start))
	}
	for _, conn := range conns {
		conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
	}
	c.CloseIdleConnections()
	backToBaseline(t, base, base.threads+16)
}
