//go:build linux && !flashserve_portable

package flashserve

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/flashserve/caddy-flash-serve/prewarm"
)

// bigFileEngine sends a large file on cleartext HTTP/1.1: the listener wrapper sends it with sendfile.
const bigFileEngine = "sendfile"

// prewarmThroughAPI evicts a file from the page cache, prewarms it through
// the admin API and checks with mincore that it is resident again.
func prewarmThroughAPI(t *testing.T, admin, root, bigPath string, size int) {
	t.Helper()
	// Dirty pages cannot be dropped: write them back first.
	if f, err := os.Open(bigPath); err == nil {
		f.Sync()
		f.Close()
	}
	// Pages still referenced (by a socket buffer that a sendfile filled,
	// say) survive DONTNEED: try again for a while, up to 10 s, since on a
	// loaded machine they were seen held for more than 2 s.
	eventually(t, 10*time.Second, func() error {
		if err := prewarm.Evict(bigPath); err != nil {
			t.Fatal(err)
		}
		if r, _ := prewarm.FileResidency(bigPath); r.Resident >= r.Size {
			return fmt.Errorf("the file is still resident after DONTNEED (%d bytes): the test would prove nothing", r.Resident)
		}
		return nil
	})
	checkPrewarmAnswer(t, admin, root, size)
	if r, err := prewarm.FileResidency(bigPath); err != nil || r.Resident < r.Size {
		t.Errorf("after prewarm: %d of %d bytes resident (%v)", r.Resident, r.Size, err)
	}
}
