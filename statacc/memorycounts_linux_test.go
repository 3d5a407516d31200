//go:build linux && !flashserve_portable

package statacc

import (
	"context"
	"sync"
	"testing"
	"time"
)

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
	c.entries.Range(func(m *meta) bool { live += int64(len(m.data)); return true })
	if got := c.Snapshot()[MemoryBytes]; got != live {
		t.Errorf("MemoryBytes %d, data of the entries in the map %d", got, live)
	}
}
