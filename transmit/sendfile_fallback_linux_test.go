//go:build linux && !flashserve_portable

package transmit

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// run is one piece of a response body: Len bytes of the file from Off,
// handed to the connection with its own ReadFrom, as flash_serve sends
// each part of a multipart body.
type run struct{ Off, Len int64 }

const runSeparator = "\r\n--part--\r\n"

// runReport is what the handler saw of one response's runs, sent once
// every ReadFrom has returned (the counters are final then).
type runReport struct{ zeroCopy, refused []bool }

// startRunServer serves f behind the flash_serve listener wrapper: the
// path /off-len,off-len,... answers those runs of f with the separator
// between two, under an exact Content-Length, and reports each response.
// The server is shut down when the test ends.
func startRunServer(t *testing.T, f *os.File) (string, <-chan runReport) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fd := int(f.Fd())
	reports := make(chan runReport, 16)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs, err := parseRuns(strings.TrimPrefix(r.URL.Path, "/"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var total int64
		for i, rn := range runs {
			if i > 0 {
				total += int64(len(runSeparator))
			}
			total += rn.Len
		}
		w.Header().Set("Content-Length", strconv.FormatInt(total, 10))
		var rep runReport
		defer func() { reports <- rep }()
		for i, rn := range runs {
			if i > 0 {
				io.WriteString(w, runSeparator)
			}
			src := &fileSource{File: f, FD: fd, Off: rn.Off, N: rn.Len}
			n, err := w.(io.ReaderFrom).ReadFrom(src)
			rep.zeroCopy = append(rep.zeroCopy, src.ZeroCopy)
			rep.refused = append(rep.refused, src.Refused)
			if err != nil || n != rn.Len {
				t.Errorf("run %d of %s: ReadFrom sent %d of %d: %v", i, r.URL.Path, n, rn.Len, err)
				return
			}
		}
	})}
	go srv.Serve((ListenerWrapper{}).WrapListener(ln))
	t.Cleanup(func() {
		// Shutdown returns once every connection has ended, so that
		// nothing still runs the handler when the test's hooks go.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return ln.Addr().String(), reports
}

// report waits for the handler's report of the response just read.
func report(t *testing.T, reports <-chan runReport) runReport {
	t.Helper()
	select {
	case rep := <-reports:
		return rep
	case <-time.After(10 * time.Second):
		t.Fatal("no report from the handler")
		return runReport{}
	}
}

func parseRuns(s string) ([]run, error) {
	var runs []run
	for _, p := range strings.Split(s, ",") {
		var rn run
		if _, err := fmt.Sscanf(p, "%d-%d", &rn.Off, &rn.Len); err != nil {
			return nil, err
		}
		runs = append(runs, rn)
	}
	return runs, nil
}

func runsPath(runs []run) string {
	var parts []string
	for _, rn := range runs {
		parts = append(parts, fmt.Sprintf("%d-%d", rn.Off, rn.Len))
	}
	return "/" + strings.Join(parts, ",")
}

func wantBody(data []byte, runs []run) []byte {
	var b []byte
	for i, rn := range runs {
		if i > 0 {
			b = append(b, runSeparator...)
		}
		b = append(b, data[rn.Off:rn.Off+rn.Len]...)
	}
	return b
}

// keepAliveClient sends requests one after another on one connection.
type keepAliveClient struct {
	c  net.Conn
	br *bufio.Reader
}

func dialKeepAlive(t *testing.T, addr string) *keepAliveClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &keepAliveClient{c: c, br: bufio.NewReader(c)}
}

// get fetches a path and fails the test unless the answer is a 200 that
// keeps the connection open.
func (k *keepAliveClient) get(t *testing.T, path string) []byte {
	t.Helper()
	k.c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(k.c, "GET %s HTTP/1.1\r\nHost: test\r\n\r\n", path); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	req, _ := http.NewRequest("GET", path, nil)
	resp, err := http.ReadResponse(k.br, req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("GET %s: reading %d of %d bytes: %v", path, len(body), resp.ContentLength, err)
	}
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("GET %s: status %d, close %v", path, resp.StatusCode, resp.Close)
	}
	return body
}

// sendfileRefusal makes sendfile refuse with errno once a call would read
// at or past file offset from (at once for 0; never for -1): a call that
// starts before it stops there, so that the refusal comes after some
// bytes. refused counts the refusals.
type sendfileRefusal struct {
	from    atomic.Int64
	errno   atomic.Uintptr
	refused atomic.Int64
}

// refuseSendfile installs a sendfileRefusal, set to refuse nothing, until
// the test ends. Start the test's servers after it, so that they are shut
// down before it is removed.
func refuseSendfile(t *testing.T) *sendfileRefusal {
	t.Helper()
	h := new(sendfileRefusal)
	h.from.Store(-1)
	prev := sendfileCall
	sendfileCall = func(out, in int, off *int64, n int) (int, error) {
		if from := h.from.Load(); from >= 0 {
			if *off >= from {
				h.refused.Add(1)
				return 0, syscall.Errno(h.errno.Load())
			}
			n = int(min(int64(n), from-*off))
		}
		return unix.Sendfile(out, in, off, n)
	}
	t.Cleanup(func() { sendfileCall = prev })
	return h
}

// TestSendfileRefusedFallsBackToCopy: when the kernel refuses sendfile
// (EINVAL, ENOSYS, EOPNOTSUPP), before any byte or after some, the rest of
// the body is copied from where it stopped: whole bodies, ranges and
// bodies sent in several runs come out exact, and the connection stays
// open for the next request.
func TestSendfileRefusedFallsBackToCopy(t *testing.T) {
	f, data := testFile(t, 3<<20+17)
	defer f.Close()
	hook := refuseSendfile(t)
	addr, reports := startRunServer(t, f)
	for _, tc := range []struct {
		name  string
		runs  []run
		from  int64
		errno syscall.Errno
		// zeroCopied: sendfile sent some of the body before it was refused.
		zeroCopied bool
		refusals   int64
	}{
		{"whole, before any byte", []run{{0, int64(len(data))}}, 0, unix.EINVAL, false, 1},
		{"whole, after 1 MiB", []run{{0, int64(len(data))}}, 1<<20 + 3, unix.ENOSYS, true, 1},
		{"range, after some bytes", []run{{1000, 2<<20 + 5}}, 1500000, unix.EOPNOTSUPP, true, 1},
		{"range, before any byte", []run{{70000, 100000}}, 0, unix.EINVAL, false, 1},
		{"runs", []run{{0, 600}, {10000, 1 << 20}, {2 << 20, 700000}}, 310000, unix.EINVAL, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hook.from.Store(tc.from)
			hook.errno.Store(uintptr(tc.errno))
			k := dialKeepAlive(t, addr)
			path := runsPath(tc.runs)
			want := wantBody(data, tc.runs)
			for round := range 2 {
				before := stats.refused.Load()
				hook.refused.Store(0)
				got := k.get(t, path)
				rep := report(t, reports)
				if !bytes.Equal(got, want) {
					t.Fatalf("round %d: body of %d bytes differs from the file's %d (first difference at %d)",
						round, len(got), len(want), firstDiff(got, want))
				}
				if n := hook.refused.Load(); n != tc.refusals {
					t.Errorf("round %d: %d refusals, want %d (one per run that reached the refusal, then copied)", round, n, tc.refusals)
				}
				if d := stats.refused.Load() - before; d != tc.refusals {
					t.Errorf("round %d: stats.refused grew by %d, want %d", round, d, tc.refusals)
				}
				if rep.zeroCopy[0] != tc.zeroCopied || !rep.refused[len(rep.refused)-1] {
					t.Errorf("round %d: runs sent with sendfile %v, refused %v; want the first with sendfile: %v, the last refused",
						round, rep.zeroCopy, rep.refused, tc.zeroCopied)
				}
			}
			// The connection is still good for a body sendfile takes whole.
			hook.from.Store(-1)
			if got := k.get(t, "/0-100000"); !bytes.Equal(got, data[:100000]) {
				t.Fatal("a later body on the same connection differs")
			}
			if rep := report(t, reports); !rep.zeroCopy[0] || rep.refused[0] {
				t.Errorf("a later body: sent with sendfile %v, refused %v", rep.zeroCopy, rep.refused)
			}
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestSendfileRefusedByTheKernel: a file the kernel cannot sendfile from
// (procfs has no splice_read, so sendfile answers EINVAL) is sent whole
// and in part by copying, exact, on a connection kept alive.
func TestSendfileRefusedByTheKernel(t *testing.T) {
	var path string
	var data []byte
	for _, p := range []string{"/proc/config.gz", "/proc/self/environ"} {
		if b, err := os.ReadFile(p); err == nil && len(b) > 2048 {
			path, data = p, b
			break
		}
	}
	if path == "" {
		t.Skip("no procfs file of more than 2 KiB to read (/proc/config.gz, /proc/self/environ)")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The kernel's answer, asked directly: this test is about that refusal.
	a, b, err := socketPair()
	if err != nil {
		t.Fatal(err)
	}
	off := int64(0)
	_, serr := unix.Sendfile(a, int(f.Fd()), &off, 100)
	unix.Close(a)
	unix.Close(b)
	if serr != unix.EINVAL {
		t.Skipf("sendfile from %s gives %v, not EINVAL, on this kernel", path, serr)
	}
	addr, reports := startRunServer(t, f)
	k := dialKeepAlive(t, addr)
	size := int64(len(data))
	for _, runs := range [][]run{{{0, size}}, {{600, size - 1200}}, {{0, 700}, {1000, 1000}, {size - 600, 600}}} {
		before := stats.refused.Load()
		got := k.get(t, runsPath(runs))
		rep := report(t, reports)
		if want := wantBody(data, runs); !bytes.Equal(got, want) {
			t.Fatalf("%s %v: body of %d bytes differs from the file's %d", path, runs, len(got), len(want))
		}
		if stats.refused.Load() == before || !rep.refused[len(rep.refused)-1] {
			t.Errorf("%s %v: no refusal counted (runs refused: %v)", path, runs, rep.refused)
		}
	}
	t.Logf("%s: %d bytes, sendfile refused with EINVAL and copied", path, size)
}

func socketPair() (int, int, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	return fds[0], fds[1], err
}
