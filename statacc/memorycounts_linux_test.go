//go:build linux && !flashserve_portable

package statacc

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flashserve/caddy-flash-serve/internal/proctest"
)

// TestMemoryCountsBalanceUnderShutDropRenameClose: memory entries whose
// descriptors the clock closes (bare entries) while purges, renames over
// (inotify drops), entry evictions and a Close race readers leave every
// count at 0, MemoryBytes equal to the live entries' data while running,
// and every body one version of its file, whole.
func TestMemoryCountsBalanceUnderShutDropRenameClose(t *testing.T) {
	const size = 9 << 10
	root := t.TempDir()
	paths := namedFiles(t, root, 60, size)
	fds := proctest.FDs(t)
	c := New(Options{Workers: 2, MaxOpenFiles: 3, MaxEntries: 20, Revalidate: time.Hour, MemoryBudget: 1 << 20})
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go untilStopped(&wg, stop, func(i int) {
		if i%5 == 0 {
			c.Purge(filepath.Join(root, "d"+strconv.Itoa(i%3)), true)
		} else {
			c.Purge(paths[i%len(paths)], false)
		}
		time.Sleep(300 * time.Microsecond)
	})
	go untilStopped(&wg, stop, func(i int) {
		p := paths[(i*11)%len(paths)]
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, []byte(versionOf(p, 1+i%2, size)), 0o644); err == nil {
			os.Rename(tmp, p)
		}
		time.Sleep(500 * time.Microsecond)
	})
	var readers sync.WaitGroup
	for g := range 6 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for i := range 3000 {
				if g == 0 && i == 2500 {
					c.Close()
				}
				p := paths[(i*7+g*13)%len(paths)]
				e, err := c.Get(ctx, p)
				if err != nil {
					t.Error(err)
					return
				}
				b, err := e.ReadAll()
				fromData := e.Data() != nil
				e.Release()
				prefix := filepath.Base(p) + " v"
				if err != nil || len(b) != size || !strings.HasPrefix(string(b), prefix) || string(b) != versionOf(p, int(b[len(prefix)]-'0'), size) {
					t.Errorf("%s (from data %v): read %.20q (%d bytes), %v", p, fromData, b, len(b), err)
					return
				}
			}
		}()
	}
	readers.Wait()
	close(stop)
	wg.Wait()
	closeClean(t, c, fds)
	if n, d := ringDead(&c.files, func(m *meta) bool { return m.gone.Load() }); int64(n) != d {
		t.Errorf("entries' clock: %d gone on the ring, %d counted dead", n, d)
	}
	if n, d := ringDead(&c.fds, func(e *Entry) bool { return e.shut.Load() }); int64(n) != d {
		t.Errorf("descriptors' clock: %d shut on the ring, %d counted dead", n, d)
	}
}

// TestMemoryBytesMatchLiveData: while entries are shut and dropped,
// MemoryBytes is the data of the entries in the map, once they settle.
func TestMemoryBytesMatchLiveData(t *testing.T) {
	const size = 5 << 10
	root := t.TempDir()
	paths := namedFiles(t, root, 40, size)
	c := New(Options{Workers: 2, MaxOpenFiles: 2, MaxEntries: 16, Revalidate: time.Hour, MemoryBudget: 1 << 20})
	defer c.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				p := paths[(i*7+g*13)%len(paths)]
				if i%50 == 0 {
					c.Purge(p, false)
				}
				e, err := c.Get(ctx, p)
				if err != nil {
					t.Error(err)
					return
				}
				e.Release()
			}
		}()
	}
	wg.Wait()
	var live int64
	c.entries.Range(func(_, v any) bool { live += int64(len(v.(*meta).data)); return true })
	if got := c.Snapshot()[MemoryBytes]; got != live {
		t.Errorf("MemoryBytes %d, data of the entries in the map %d", got, live)
	}
}
