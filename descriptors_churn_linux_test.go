//go:build linux && !flashserve_portable

package flashserve

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestBareDescriptorsUnderChurnServeOwnBytes: with far more files than
// max_open_files, and the files touched (an inotify invalidation) while
// they are sent, every response of every engine that reads the entry's
// descriptor (sendfile, copy) carries its own file's bytes, never another
// file's through a closed and reused descriptor number, and the
// descriptors come back when the load ends.
func TestBareDescriptorsUnderChurnServeOwnBytes(t *testing.T) {
	for _, engine := range []string{"sendfile", "copy"} {
		t.Run(engine, func(t *testing.T) {
			root := t.TempDir()
			const files, size = 48, 192 << 10
			want := make([][]byte, files)
			for i := range files {
				want[i] = bytes.Repeat([]byte(fmt.Sprintf("<%03d>", i)), size/5)
				if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("f%03d.bin", i)), want[i], 0o644); err != nil {
					t.Fatal(err)
				}
			}
			base := settledResources(t)
			// Registered first, so it runs after Caddy stops (cleanups run
			// last in, first out).
			t.Cleanup(func() { backToBaseline(t, base, base.threads+32) })
			port := freePort(t)
			loadSites(t, "", siteBlock(port, root, flashServe("max_open_files 8", "memory_cache 0", "transmit "+engine)))
			before := snapshot()
			var stop atomic.Bool
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { // invalidations under the transfers
				defer wg.Done()
				for i := 0; !stop.Load(); i++ {
					now := time.Now()
					os.Chtimes(filepath.Join(root, fmt.Sprintf("f%03d.bin", i%files)), now, now)
					time.Sleep(time.Millisecond)
				}
			}()
			var bad atomic.Int64
			var clients sync.WaitGroup
			for g := range 6 {
				clients.Add(1)
				go func() {
					defer clients.Done()
					c := &http.Client{Timeout: 20 * time.Second}
					for k := range 60 {
						i := (g*7 + k*5) % files
						url := fmt.Sprintf("http://127.0.0.1:%d/f%03d.bin", port, i)
						req, _ := http.NewRequest("GET", url, nil)
						off := int64(0)
						if k%2 == 1 {
							off = int64(k*997) % size
							req.Header.Set("Range", fmt.Sprintf("bytes=%d-", off))
						}
						resp, err := c.Do(req)
						if err != nil {
							t.Errorf("GET %s: %v", url, err)
							return
						}
						b, err := io.ReadAll(resp.Body)
						resp.Body.Close()
						if err != nil {
							t.Errorf("GET %s: %v", url, err)
							return
						}
						if !bytes.Equal(b, want[i][off:]) {
							if bad.Add(1) <= 3 {
								t.Errorf("GET %s from %d: status %d, %d bytes that are not the file's (first %q)", url, off, resp.StatusCode, len(b), b[:min(len(b), 20)])
							}
						}
					}
				}()
			}
			clients.Wait()
			stop.Store(true)
			wg.Wait()
			after := snapshot()
			ev, inv := after.Statacc.Evictions-before.Statacc.Evictions, after.Statacc.Invalidations-before.Statacc.Invalidations
			t.Logf("%d evictions, %d invalidations under the load", ev, inv)
			if ev == 0 || inv == 0 {
				t.Errorf("%d evictions, %d invalidations: the descriptors did not churn", ev, inv)
			}
		})
	}
}
