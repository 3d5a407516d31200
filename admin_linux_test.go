//go:build linux && !flashserve_portable

package flashserve

import (
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
	for try := 0; ; try++ {
		if err := prewarm.Evict(bigPath); err != nil {
			t.Fatal(err)
		}
		r, _ := prewarm.FileResidency(bigPath)
		if r.Resident < r.Size {
			break
		}
		if try == 100 {
			t.Fatalf("the file is still resident after DONTNEED (%d bytes): the test would prove nothing", r.Resident)
		}
		time.Sleep(100 * time.Millisecond)
	}
	checkPrewarmAnswer(t, admin, root, size)
	if r, err := prewarm.FileResidency(bigPath); err != nil || r.Resident < r.Size {
		t.Errorf("after prewarm: %d of %d bytes resident (%v)", r.Resident, r.Size, err)
	}
}
