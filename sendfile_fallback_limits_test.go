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
	"strings"
	"testing"
	"time"
)

// TestSendfileRefusedUnderLimits: the copy that takes over when the kernel
// refuses sendfile (/proc/config.gz, as in
// TestSendfileRefusedByTheKernelIsCopied) also holds under limit_rate,
// which sends the body in paced chunks (the first refused, the rest
// copied), and max_transfers 1, whose place every response gives back:
// whole, range and multipart bodies are exact, paced, and one connection
// carries them all.
func TestSendfileRefusedUnderLimits(t *testing.T) {
	data := sendfileRefusedFile(t, 16<<10)
	const rate = 64 << 10 // chunks of 8 KiB
	sitePort := freePort(t)
	site := fmt.Sprintf("http://127.0.0.1:%d", sitePort)
	loadSites(t, "", siteBlock(sitePort, "/proc", flashServe("transmit sendfile", fmt.Sprint("limit_rate ", rate), "max_transfers 1")))
	size := len(data)
	c := &http.Client{Timeout: 30 * time.Second}
	defer c.CloseIdleConnections()
	var conns, reused int
	for _, tc := range []struct {
		rg   string
		want [][]byte
	}{
		{"", [][]byte{data}},
		{"bytes=1000-", [][]byte{data[1000:]}},
		{fmt.Sprintf("bytes=0-9999,12000-12999,%d-", size-600), [][]byte{data[:10000], data[12000:13000], data[size-600:]}},
		{"", [][]byte{data}},
	} {
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
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("range %q: %v", tc.rg, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if err != nil || int64(len(body)) != resp.ContentLength {
			t.Fatalf("range %q: %d of %d bytes: %v", tc.rg, len(body), resp.ContentLength, err)
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
					t.Fatalf("range %q: %v", tc.rg, err)
				}
				b, _ := io.ReadAll(p)
				got = append(got, b)
			}
		} else {
			got = [][]byte{body}
		}
		if len(got) != len(tc.want) {
			t.Fatalf("range %q: %d parts, want %d", tc.rg, len(got), len(tc.want))
		}
		var n int
		for i := range got {
			n += len(got[i])
			if !bytes.Equal(got[i], tc.want[i]) {
				t.Fatalf("range %q: part %d is %d bytes that differ from the file's %d", tc.rg, i, len(got[i]), len(tc.want[i]))
			}
		}
		// Paced: the bytes past the first chunk cannot leave faster than
		// the rate (a lower bound only; load makes it slower).
		minTook := time.Duration(n-rate/8) * time.Second / rate
		t.Logf("range %q: %d bytes in %v (at least %v at the rate)", tc.rg, n, took.Round(time.Millisecond), minTook.Round(time.Millisecond))
		if took < minTook*3/4 {
			t.Errorf("range %q: %d bytes in %v, faster than limit_rate %d allows (%v)", tc.rg, n, took, rate, minTook)
		}
		if resp.Close {
			t.Errorf("range %q: the server closed the connection", tc.rg)
		}
	}
	if reused != conns-1 {
		t.Errorf("%d of %d requests reused the connection; want all but the first", reused, conns)
	}
}
