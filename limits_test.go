package flashserve

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestMaxTransfers(t *testing.T) {
	root := t.TempDir()
	body := bytes.Repeat([]byte("0123456789abcdef"), 8<<10) // 128 KiB
	if err := os.WriteFile(filepath.Join(root, "f.bin"), body, 0o644); err != nil {
		t.Fatal(err)
	}
	noQueue, queued := freePort(t), freePort(t)
	// 128 KiB at 128 KiB/s: each body holds its place for about 1 s.
	loadSites(t, "", siteBlock(noQueue, root, flashServe("max_transfers 1", "limit_rate 128KiB"))+
		siteBlock(queued, root, flashServe("max_transfers 1 queue 20s", "limit_rate 128KiB")))
	c := &http.Client{Timeout: 30 * time.Second}

	for _, port := range []int{noQueue, queued} {
		url := fmt.Sprintf("http://127.0.0.1:%d/f.bin", port)
		// The first client holds the only place until its body is read.
		first, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		if first.StatusCode != 200 {
			t.Fatalf("first client: %d", first.StatusCode)
		}
		limited0 := counters.limited.Load()

		// HEAD and conditional requests that send no body still pass.
		resp, err := c.Head(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()

		type result struct {
			status     int
			retryAfter string
			body       []byte
		}
		second := make(chan result, 1)
		go func() {
			resp, err := c.Get(url)
			if err != nil {
				t.Error(err)
				second <- result{}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			second <- result{resp.StatusCode, resp.Header.Get("Retry-After"), b}
		}()

		if port == noQueue {
			r := <-second
			if r.status != http.StatusServiceUnavailable || r.retryAfter == "" {
				t.Errorf("no queue: second client got %d with Retry-After %q, want 503 with Retry-After", r.status, r.retryAfter)
			}
			if counters.limited.Load() != limited0+1 {
				t.Errorf("the 503 was not counted: %d → %d", limited0, counters.limited.Load())
			}
		}
		got, err := io.ReadAll(first.Body)
		first.Body.Close()
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("first client: body differs (%d bytes, %v)", len(got), err)
		}
		if port == queued {
			// It waited in the queue for the first body, then got its own.
			r := <-second
			if r.status != 200 || !bytes.Equal(r.body, body) {
				t.Errorf("queued client: status %d, %d bytes; want 200 and the file", r.status, len(r.body))
			}
		}
		// The place is free again.
		if status, _, b := get(t, c, url); status != 200 || !bytes.Equal(b, body) {
			t.Errorf("after the transfers: status %d", status)
		}
	}
	// The handler gives its place back just after the client has read the
	// last byte.
	waitFor(t, "no transfer in flight", 5*time.Second, func() bool { return counters.inFlight.Load() == 0 })
}

func TestLimitRate(t *testing.T) {
	root := t.TempDir()
	body := bytes.Repeat([]byte("flash_serve rate "), 16<<10) // 272 KiB
	if err := os.WriteFile(filepath.Join(root, "f.bin"), body, 0o644); err != nil {
		t.Fatal(err)
	}
	paced, afterAll := freePort(t), freePort(t)
	loadSites(t, "", siteBlock(paced, root, flashServe("limit_rate 128KiB after 64KiB"))+
		siteBlock(afterAll, root, flashServe("limit_rate 64KiB after 1MiB")))
	c := &http.Client{Timeout: 60 * time.Second}
	for _, proto := range []string{"whole", "range"} {
		url := fmt.Sprintf("http://127.0.0.1:%d/f.bin", paced)
		req, _ := http.NewRequest("GET", url, nil)
		want := body
		if proto == "range" {
			req.Header.Set("Range", "bytes=0-9,100-262143")
		}
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		elapsed := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		if proto == "whole" && !bytes.Equal(got, want) {
			t.Fatalf("paced body differs: %d bytes", len(got))
		}
		// After the first 64 KiB, the rest leaves at 128 KiB/s, less the
		// last chunk (16 KiB) which is sent without a wait after it. A
		// slow machine only makes it longer.
		n := int64(len(body))
		if proto == "range" {
			n = 10 + 262144 - 100
		}
		minimum := time.Duration(float64(n-64<<10-16<<10) / float64(128<<10) * float64(time.Second))
		if elapsed < minimum {
			t.Errorf("%s: %d bytes in %v, faster than limit_rate allows (%v)", proto, n, elapsed, minimum)
		}
		t.Logf("%s: %d bytes in %v (at least %v)", proto, n, elapsed, minimum)
	}
	// Below the after threshold nothing is paced: at 64 KiB/s the body
	// would take more than 4 s.
	start := time.Now()
	status, _, got := get(t, c, fmt.Sprintf("http://127.0.0.1:%d/f.bin", afterAll))
	if status != 200 || !bytes.Equal(got, body) {
		t.Fatalf("after 1MiB: status %d, %d bytes", status, len(got))
	}
	if elapsed := time.Since(start); elapsed > 3*time.Second {
		t.Errorf("a body under limit_rate's after threshold took %v; it should not be paced", elapsed)
	}
}
