//go:build linux && !flashserve_portable

package flashserve

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptrace"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSendfileRefusedByTheKernelIsCopied: /proc/config.gz is a regular
// file with a size that the kernel cannot sendfile from (procfs has no
// splice_read: EINVAL). Served with the sendfile engine through the
// listener wrapper, whole, as a range and as a multipart range, every body
// is exact, the connection is kept for the next request, and each refusal
// is counted in caddy_flash_serve_sendfile_refused_total. (The refusal
// after some bytes, and ENOSYS and EOPNOTSUPP, are injected in
// transmit's TestSendfileRefusedFallsBackToCopy.)
func TestSendfileRefusedByTheKernelIsCopied(t *testing.T) {
	data := sendfileRefusedFile(t, 4096)

	adminPort, sitePort := freePort(t), freePort(t)
	admin := fmt.Sprintf("http://127.0.0.1:%d", adminPort)
	site := fmt.Sprintf("http://127.0.0.1:%d", sitePort)
	loadSites(t, fmt.Sprintf("admin 127.0.0.1:%d\n\tmetrics", adminPort), siteBlock(sitePort, "/proc", flashServe("transmit sendfile")))
	scrape := func() string {
		status, b := adminCall(t, "GET", admin+"/metrics", "")
		if status != 200 {
			t.Fatalf("/metrics: %d %s", status, b)
		}
		return string(b)
	}
	const refused = "caddy_flash_serve_sendfile_refused_total"

	size := len(data)
	c := &http.Client{Timeout: 30 * time.Second}
	defer c.CloseIdleConnections()
	var conns, reused int
	for round := range 2 {
		for _, tc := range []struct {
			rg   string
			want [][]byte // the body, or each part of a multipart one
		}{
			{"", [][]byte{data}},
			{"bytes=1000-", [][]byte{data[1000:]}},
			{fmt.Sprintf("bytes=0-699,2000-2999,%d-", size-600), [][]byte{data[:700], data[2000:3000], data[size-600:]}},
		} {
			before := scrape()
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
				conns++
				if i.Reused {
					reused++
				}
			}})
			req, _ := http.NewRequestWithContext(ctx, "GET", site+"/config.gz", nil)
			if tc.rg != "" {
				req.Header.Set("Range", tc.rg)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("round %d, range %q: %v", round, tc.rg, err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || int64(len(body)) != resp.ContentLength {
				t.Fatalf("round %d, range %q: %d of %d bytes: %v", round, tc.rg, len(body), resp.ContentLength, err)
			}
			var got [][]byte
			if mt, params, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); strings.HasPrefix(mt, "multipart/") {
				mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
				for {
					p, err := mr.NextPart()
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatalf("round %d, range %q: %v", round, tc.rg, err)
					}
					b, _ := io.ReadAll(p)
					got = append(got, b)
				}
			} else {
				got = [][]byte{body}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("round %d, range %q: %d parts, want %d", round, tc.rg, len(got), len(tc.want))
			}
			for i := range got {
				if !bytes.Equal(got[i], tc.want[i]) {
					t.Fatalf("round %d, range %q: part %d is %d bytes that differ from the file's %d", round, tc.rg, i, len(got[i]), len(tc.want[i]))
				}
			}
			if resp.Close {
				t.Errorf("round %d, range %q: the server closed the connection", round, tc.rg)
			}
			if d := metricValue(t, scrape(), refused) - metricValue(t, before, refused); d < 1 {
				t.Errorf("round %d, range %q: caddy_flash_serve_sendfile_refused_total went up by %v, want at least 1", round, tc.rg, d)
			}
		}
	}
	// One connection for all six: the first request dials, the rest reuse it.
	if reused != conns-1 {
		t.Errorf("%d of %d requests reused the connection; want all but the first", reused, conns)
	}
}

// sendfileRefusedFile returns the bytes of /proc/config.gz, a regular file
// of at least minSize bytes that the kernel refuses to sendfile from
// (procfs has no splice_read: EINVAL). The test is skipped where the file
// is missing or the kernel answers otherwise.
func sendfileRefusedFile(t *testing.T, minSize int) []byte {
	t.Helper()
	const path = "/proc/config.gz"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("no %s on this kernel (CONFIG_IKCONFIG_PROC): %v", path, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != int64(len(data)) || len(data) < minSize {
		t.Skipf("%s does not read as the size it states, or is under %d bytes", path, minSize)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	var off int64
	_, serr := unix.Sendfile(fds[0], int(f.Fd()), &off, 100)
	unix.Close(fds[0])
	unix.Close(fds[1])
	if serr != unix.EINVAL {
		t.Skipf("sendfile from %s gives %v here, not EINVAL", path, serr)
	}
	return data
}
