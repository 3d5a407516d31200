//go:build linux && !flashserve_portable

package flashserve

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flashserve/caddy-flash-serve/transmit"
)

// segmentCountingClient is an HTTP/1.1 client of one keep-alive
// connection whose dataSegments reports how many TCP segments with data
// the connection has received so far (TCP_INFO).
type segmentCountingClient struct {
	*http.Client
	conn *net.TCPConn
}

func newSegmentCountingClient(t *testing.T) *segmentCountingClient {
	sc := &segmentCountingClient{}
	tr := &http.Transport{
		MaxConnsPerHost: 1,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				sc.conn = c.(*net.TCPConn)
			}
			return c, err
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	sc.Client = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	return sc
}

func (sc *segmentCountingClient) dataSegments(t *testing.T) uint32 {
	t.Helper()
	if sc.conn == nil {
		return 0
	}
	raw, err := sc.conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	var ierr error
	if err := raw.Control(func(fd uintptr) { info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil {
		t.Fatalf("the client's connection: %v", err)
	}
	if ierr != nil {
		t.Fatal(ierr)
	}
	return info.Data_segs_in
}

// fetch sends one request on the client's connection and returns the
// response, its body and the data segments that came meanwhile.
func (sc *segmentCountingClient) fetch(t *testing.T, method, url, rangeHeader string) (*http.Response, []byte, uint32) {
	t.Helper()
	before := sc.dataSegments(t)
	req, _ := http.NewRequest(method, url, nil)
	if rangeHeader != "" {
		req.Header.Set("Range", rangeHeader)
	}
	resp, err := sc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, body, sc.dataSegments(t) - before
}

// TestHeadAndBodyLeaveInOneSegment: net/http writes an HTTP/1 response
// through a 4 KiB buffer, so a body of more than about 3.8 KiB left as
// two writes and two TCP segments, the headers with the body's first
// bytes, then the rest. A body flash_serve copies (from memory, or read
// without waiting from the page cache) now leaves with its headers in one
// write: on loopback, whose segments hold 64 KiB, the client receives one
// segment per response. Each response is asked twice on one keep-alive
// connection and arrives whole; a range and a HEAD request keep their
// bytes, and a body sendfile carries is unchanged.
func TestHeadAndBodyLeaveInOneSegment(t *testing.T) {
	root := t.TempDir()
	rng := rand.NewChaCha8([32]byte{3})
	files := map[string][]byte{}
	for _, size := range []int{1 << 10, 8 << 10, 20<<10 + 33} {
		b := make([]byte, size)
		rng.Read(b)
		name := fmt.Sprintf("/f%d.bin", size)
		if err := os.WriteFile(filepath.Join(root, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	port := freePort(t)
	loadSites(t, "", siteBlock(port, root, flashServe("memory_cache 16MiB max_file 64KiB")))
	sc := newSegmentCountingClient(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	do := func(method, name, rangeHeader string) (int, []byte, uint32) {
		t.Helper()
		resp, body, segs := sc.fetch(t, method, base+name, rangeHeader)
		return resp.StatusCode, body, segs
	}
	do("GET", "/f1024.bin", "") // the connection is open from here on
	for _, name := range []string{"/f8192.bin", "/f20513.bin", "/f1024.bin"} {
		want := files[name]
		for _, round := range []string{"first", "second"} {
			status, got, segs := do("GET", name, "")
			if status != 200 || !bytes.Equal(got, want) {
				t.Fatalf("%s, %s request: status %d, %d bytes, want %d", name, round, status, len(got), len(want))
			}
			t.Logf("%s, %s request: %d data segments", name, round, segs)
			if segs != 1 {
				t.Errorf("%s, %s request: the response came in %d segments, want 1", name, round, segs)
			}
		}
	}
	status, got, segs := do("GET", "/f8192.bin", "bytes=100-5000")
	if status != 206 || !bytes.Equal(got, files["/f8192.bin"][100:5001]) {
		t.Errorf("range: status %d, %d bytes", status, len(got))
	}
	if segs != 1 {
		t.Errorf("range: the response came in %d segments, want 1", segs)
	}
	if status, got, _ := do("HEAD", "/f20513.bin", ""); status != 200 || len(got) != 0 {
		t.Errorf("HEAD: status %d, %d bytes", status, len(got))
	}
	// A body sendfile sends: the headers and 512 bytes, then sendfile.
	big := make([]byte, 300<<10)
	rng.Read(big)
	if err := os.WriteFile(filepath.Join(root, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if status, got, _ := do("GET", "/big.bin", ""); status != 200 || !bytes.Equal(got, big) {
			t.Fatalf("big.bin: status %d, %d bytes", status, len(got))
		}
	}
}

// TestSendfileBodyLeavesWholeWithItsHeader: a body sendfile carries
// through the listener wrapper leaves by sendfile from its first byte
// (the header is written before net/http would copy the first 512 bytes
// itself), and the header waits for it (MSG_MORE): on loopback, whose
// segments hold 64 KiB, the client receives a body of 8 or 20 KiB, whole
// or a range, in one segment with its header. A multipart range arrives
// whole, every part's bytes by sendfile. A rule that removes the
// Content-Type leaves the header to net/http's sniffing, which needs the
// body's first bytes: those are copied as before, and the rest still goes
// by sendfile.
func TestSendfileBodyLeavesWholeWithItsHeader(t *testing.T) {
	root := t.TempDir()
	rng := rand.NewChaCha8([32]byte{5})
	files := map[string][]byte{}
	for _, size := range []int{8 << 10, 20 << 10} {
		b := make([]byte, size)
		rng.Read(b)
		name := fmt.Sprintf("/f%d.bin", size)
		if err := os.WriteFile(filepath.Join(root, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	port, sniffPort := freePort(t), freePort(t)
	// memory_cache 0: a file kept in memory leaves from memory under every
	// policy, and the 8 KiB one is within max_file.
	loadSites(t, "", siteBlock(port, root, flashServe("transmit sendfile", "memory_cache 0"))+
		siteBlock(sniffPort, root, "header -Content-Type", flashServe("transmit sendfile", "memory_cache 0")))
	sc := newSegmentCountingClient(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	// sendfileSince is what sendfile has sent since before, once it is
	// want: a call's bytes are counted when it returns, which can be just
	// after the client has read them.
	sendfileSince := func(before, want int64) int64 {
		for deadline := time.Now().Add(2 * time.Second); transmit.Snapshot().SendfileBytes-before < want && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		return transmit.Snapshot().SendfileBytes - before
	}
	// The connection is open from here on, and the first body counted.
	opened := transmit.Snapshot().SendfileBytes
	sc.fetch(t, "GET", base+"/f8192.bin", "")
	sendfileSince(opened, 8<<10)
	for _, tc := range []struct {
		name, rangeHeader string
		start, end        int // the body's bytes of the file
	}{
		{"/f8192.bin", "", 0, 8 << 10},
		{"/f20480.bin", "", 0, 20 << 10},
		{"/f20480.bin", "bytes=100-15000", 100, 15001},
	} {
		for _, round := range []string{"first", "second"} {
			before := transmit.Snapshot().SendfileBytes
			resp, got, segs := sc.fetch(t, "GET", base+tc.name, tc.rangeHeader)
			want := files[tc.name][tc.start:tc.end]
			if !bytes.Equal(got, want) {
				t.Fatalf("%s %q: status %d, %d bytes, want %d of the file", tc.name, tc.rangeHeader, resp.StatusCode, len(got), len(want))
			}
			sent := sendfileSince(before, int64(len(want)))
			t.Logf("%s %q, %s request: %d data segments, %d bytes by sendfile", tc.name, tc.rangeHeader, round, segs, sent)
			if sent != int64(len(want)) {
				t.Errorf("%s %q: %d of the %d body bytes left by sendfile", tc.name, tc.rangeHeader, sent, len(want))
			}
			if segs != 1 {
				t.Errorf("%s %q, %s request: the response came in %d segments, want 1", tc.name, tc.rangeHeader, round, segs)
			}
		}
	}
	before := transmit.Snapshot().SendfileBytes
	resp, got, _ := sc.fetch(t, "GET", base+"/f20480.bin", "bytes=0-999,2000-9999")
	if resp.StatusCode != http.StatusPartialContent || !bytes.Contains(got, files["/f20480.bin"][:1000]) ||
		!bytes.Contains(got, files["/f20480.bin"][2000:10000]) {
		t.Errorf("multipart: status %d, %d bytes without both parts", resp.StatusCode, len(got))
	}
	if sent := sendfileSince(before, 9000); sent != 9000 {
		t.Errorf("multipart: %d of the parts' 9000 bytes left by sendfile", sent)
	}

	sniffed := fmt.Sprintf("http://127.0.0.1:%d", sniffPort)
	before = transmit.Snapshot().SendfileBytes
	resp, got, _ = sc.fetch(t, "GET", sniffed+"/f20480.bin", "")
	if !bytes.Equal(got, files["/f20480.bin"]) || resp.Header.Get("Content-Type") != http.DetectContentType(files["/f20480.bin"]) {
		t.Errorf("Content-Type removed: %d bytes (exact: %v), Content-Type %q, want net/http's sniffed %q", len(got),
			bytes.Equal(got, files["/f20480.bin"]), resp.Header.Get("Content-Type"), http.DetectContentType(files["/f20480.bin"]))
	}
	if sent := sendfileSince(before, 20<<10-sniffLen); sent != 20<<10-sniffLen {
		t.Errorf("Content-Type removed: %d bytes by sendfile, want all but net/http's %d", sent, sniffLen)
	}
}
