//go:build linux && !flashserve_portable

package flashserve

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/flashserve/caddy-flash-serve/internal/hotset"
	"github.com/flashserve/caddy-flash-serve/prewarm"
)

// TestPrewarmBudgetHoldsAcrossHotSetAndPaths: prewarm_budget is counted
// in whole pages within a pass (Warmer.Run), but the paths pass gets the
// budget less the bytes the hot-set pass read, not the pages it took. A
// hot set of 16 one-byte files takes 16 pages of a 16-page budget and
// leaves the paths pass 64 KiB - 16 B: 15 more pages. The page cache then
// holds 31 pages of what a 64 KiB budget allowed.
func TestPrewarmBudgetHoldsAcrossHotSetAndPaths(t *testing.T) {
	page := int64(os.Getpagesize())
	const hotFiles, coldFiles = 16, 32
	budget := hotFiles * page
	root := t.TempDir()
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	var all []string
	var hot []hotset.File
	for i := range hotFiles + coldFiles {
		name := fmt.Sprintf("cold%02d.bin", i)
		if i < hotFiles {
			name = fmt.Sprintf("hot%02d.bin", i)
		}
		p := filepath.Join(root, name)
		if err := os.WriteFile(p, []byte{'x'}, 0o644); err != nil {
			t.Fatal(err)
		}
		all = append(all, p)
		if i < hotFiles {
			hot = append(hot, hotset.File{Path: p, Size: 1, Hits: int64(100 - i)})
		}
	}
	evictAll(t, all)
	if r, _ := prewarm.FileResidency(all[0]); !r.Known {
		t.Skip("mincore is not trusted for these files (not their owner): residency cannot be counted")
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	fsrv := &FlashServe{Root: root, Prewarm: []string{"*"}, PrewarmBudget: budget, PrewarmWorkers: 2}
	probe := &FlashServe{Root: root, PrewarmBudget: budget, PrewarmWorkers: 2}
	probe.provisionCacheKeyOnly()
	if err := hotset.Save(hotSetPath(probe.cacheKey), hot); err != nil {
		t.Fatal(err)
	}
	if err := fsrv.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	fsrv.prewarm.wg.Wait() // no keep_hot: both passes are done
	defer fsrv.Cleanup()
	var pages, hotPages int64
	for i, p := range all {
		r, err := prewarm.FileResidency(p)
		if err != nil {
			t.Fatal(err)
		}
		n := (r.Resident + page - 1) / page
		pages += n
		if i < hotFiles {
			hotPages += n
		}
	}
	t.Logf("budget %d pages: %d pages resident, %d of them the hot set's", budget/page, pages, hotPages)
	if hotPages != hotFiles {
		t.Fatalf("%d of the %d hot files warmed: the test would prove nothing", hotPages, hotFiles)
	}
	if pages > budget/page {
		t.Errorf("the warm-up brought %d pages into the page cache, the budget is %d pages (%d bytes)", pages, budget/page, budget)
	}
}
