//go:build linux

package flashserve

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rssBytes reads this process's resident set from /proc/self/status.
func rssBytes(t testing.TB) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS line in /proc/self/status")
	return 0
}

// TestAdminPrewarmStormIsBounded: 200 prewarm requests at once, over four
// roots, start at most maxAdminPrewarms warm-ups: every answer is a 202
// (a new run, or one joined), a 409 or a 429, and while they run the
// process holds at most their descriptors (a batch of 16 files each), a
// few goroutines each, not 200 runs' worth. Counted, not timed: the peaks
// are sampled until every run has ended. (The RSS is logged, not checked:
// the race detector's shadow memory grows with the requests themselves;
// the runs' buffers are bounded by prewarmWorkers.)
func TestAdminPrewarmStormIsBounded(t *testing.T) {
	var roots []string
	for r := range 4 {
		root := t.TempDir()
		for i := range 150 {
			// Two batches' worth of small files, then larger ones, so that
			// a run lasts long enough to be seen.
			size := 8 << 10
			if i >= 32 {
				size = 256 << 10
			}
			if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("f%03d.bin", i)), bytes.Repeat([]byte{byte(r + i)}, size), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		roots = append(roots, root)
	}
	adminPort := freePort(t)
	admin := fmt.Sprintf("http://127.0.0.1:%d/flash_serve/prewarm", adminPort)
	loadSites(t, fmt.Sprintf("admin 127.0.0.1:%d", adminPort), siteBlock(freePort(t), roots[0], "flash_serve"))
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	runtime.GC()
	base := settledResources(t)
	baseRSS := rssBytes(t)

	openUnderRoots := func() int {
		n := 0
		for _, root := range roots {
			n += len(openBelow(root))
		}
		return n
	}
	var peakFDs, peakRSS atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if n := int64(openUnderRoots()); n > peakFDs.Load() {
				peakFDs.Store(n)
			}
			if n := rssBytes(t) - baseRSS; n > peakRSS.Load() {
				peakRSS.Store(n)
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()

	const requests = 200
	statuses := make(map[int]int)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Post(admin, "application/json", strings.NewReader(fmt.Sprintf(`{"root": %q}`, roots[i%len(roots)])))
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			mu.Lock()
			statuses[resp.StatusCode]++
			mu.Unlock()
			if resp.StatusCode != 202 && resp.StatusCode != 409 && resp.StatusCode != 429 {
				t.Errorf("a prewarm in the storm: %d %s; want 202, 409 or 429", resp.StatusCode, b)
			}
		}()
	}
	wg.Wait()
	// Every request has its answer: what is left runs in the background.
	runningGoroutines := runtime.NumGoroutine()
	waitFor(t, "every warm-up to end", 60*time.Second, func() bool {
		adminRuns.Lock()
		defer adminRuns.Unlock()
		return len(adminRuns.byRoot) == 0
	})
	close(stopSampling)
	<-sampled
	t.Logf("answers %v; peaks: %d descriptors on the trees, %d goroutines once every request was answered (baseline %d), RSS +%d MiB",
		statuses, peakFDs.Load(), runningGoroutines, base.goroutines, peakRSS.Load()>>20)
	// A run of 1 worker holds at most one batch of 16 files.
	if n := peakFDs.Load(); n > maxAdminPrewarms*16 {
		t.Errorf("%d descriptors open on the trees at once; want at most %d (%d runs of one batch)", n, maxAdminPrewarms*16, maxAdminPrewarms)
	}
	// A run is a few goroutines: its own, its workers, the reporter, the
	// requests' connections closing.
	if bound := base.goroutines + maxAdminPrewarms*4 + 16; runningGoroutines > bound {
		t.Errorf("%d goroutines once every request was answered; want at most %d", runningGoroutines, bound)
	}
	if statuses[202] == 0 {
		t.Error("no warm-up started")
	}
	client.CloseIdleConnections()
	backToBaseline(t, base, base.threads+16)
}
