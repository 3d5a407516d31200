//go:build linux && !flashserve_portable

package flashserve

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSymlinkSwapRace swaps a link between a file inside the root and the
// secret outside it while clients fetch it: with deny and beneath, the
// secret must never be served, whoever wins the race.
func TestSymlinkSwapRace(t *testing.T) {
	root, secret := confineTree(t)
	ports := map[string]int{}
	var sites bytes.Buffer
	for _, mode := range []string{"deny", "beneath"} {
		ports[mode] = freePort(t)
		// revalidate 1ms: every request looks again, so every request
		// races with the swapper, inotify or not.
		sites.WriteString(siteBlock(ports[mode], root, flashServe("symlinks "+mode, "revalidate 1ms", "inotify off")))
	}
	loadSites(t, "", sites.String())

	stop := make(chan struct{})
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tmp := filepath.Join(root, ".swap.tmp")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			// Relative targets: beneath refuses absolute ones even when they
			// point inside the root, so only a relative link can race.
			target := "a.txt"
			if i%2 == 1 {
				target = "../sibling/secret.txt"
			}
			os.Remove(tmp)
			if err := os.Symlink(target, tmp); err != nil {
				t.Error(err)
				return
			}
			if err := os.Rename(tmp, filepath.Join(root, "swap")); err != nil {
				t.Error(err)
				return
			}
			swaps.Add(1)
		}
	}()

	c := &http.Client{Timeout: 10 * time.Second}
	statuses := map[string]map[int]int{"deny": {}, "beneath": {}}
	for range 1500 {
		for mode, port := range ports {
			status, _, body := get(t, c, fmt.Sprintf("http://127.0.0.1:%d/swap", port))
			statuses[mode][status]++
			if bytes.Contains(body, secret) {
				t.Fatalf("%s: the secret was served through a swapped link", mode)
			}
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d swaps; statuses %v", swaps.Load(), statuses)
	if statuses["beneath"][200] == 0 || statuses["beneath"][403] == 0 {
		t.Errorf("beneath should have served the inside file and refused the outside one at least once: %v", statuses["beneath"])
	}
	if statuses["deny"][200] != 0 {
		t.Errorf("deny served a link: %v", statuses["deny"])
	}
}
