//go:build linux && !flashserve_portable

package flashserve

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flashserve/caddy-flash-serve/prewarm"
	"github.com/flashserve/caddy-flash-serve/transmit"
)

// TestColdTreeFirstReadsGoThroughTheRing: on a cold tree of small files,
// once most recent first reads have met the disk, a body's first read is
// the ring's (with a no-wait half in the batched submission) rather than
// a no-wait read of its own; every cold body still counts once in
// ColdBodies, whichever way it went. Served again, resident, the bodies
// count none, and the first read goes back to the no-wait read.
func TestColdTreeFirstReadsGoThroughTheRing(t *testing.T) {
	const n, size = 40, 20 << 10
	root := t.TempDir()
	port := ringSite(t, root)
	if !transmit.SharedRing().NoWaitFirst() {
		t.Skip("this kernel's io_uring has no IOSQE_CQE_SKIP_SUCCESS (Linux 5.17): first reads stay no-wait reads")
	}
	c := &http.Client{Timeout: 30 * time.Second}
	names, wants := make([]string, n), make([][]byte, n)
	ringFirst := make([]bool, n)
	for i := range n {
		var d, rf int64
		for try := range coldTries {
			names[i], wants[i] = freshColdFile(t, root, size)
			before := transmit.Snapshot()
			if status, _, got := get(t, c, fmt.Sprintf("http://127.0.0.1:%d%s", port, names[i])); status != 200 || !bytes.Equal(got, wants[i]) {
				t.Fatalf("cold %d: status %d, %d bytes", i, status, len(got))
			}
			after := transmit.Snapshot()
			d, rf = after.ColdBodies-before.ColdBodies, after.RingFirstBodies-before.RingFirstBodies
			if d != 0 || try == coldTries-1 {
				break
			}
			t.Logf("cold %d was back in the page cache when the request read it; a fresh evicted file (%d of %d)", i, try+2, coldTries)
		}
		ringFirst[i] = rf == 1
		if d != 1 || rf > 1 {
			t.Errorf("cold %d: ColdBodies +%d, RingFirstBodies +%d; want +1 and at most +1", i, d, rf)
		}
	}
	t.Logf("cold: first read by the ring %v", ringFirst)
	if ringFirst[0] {
		t.Error("cold 0: the first body of a fresh handler was read through the ring first; want a no-wait read")
	}
	for i := n - 8; i < n; i++ {
		if !ringFirst[i] {
			t.Errorf("cold %d: after %d cold bodies, its first read was a no-wait read of its own; want the ring's", i, i)
		}
	}
	// Past the second in which a file seen whole skips the question.
	time.Sleep(1100 * time.Millisecond)
	for i := range n {
		// Another process may drop the page cache (a test of a cold start
		// beside this one): the file is read back first if it was.
		path := filepath.Join(root, names[i])
		if r, err := prewarm.FileResidency(path); err != nil || r.Resident != int64(size) {
			t.Logf("resident %d: %+v, %v: dropped meanwhile, read again", i, r, err)
			if _, err := os.ReadFile(path); err != nil {
				t.Fatal(err)
			}
		}
		before := transmit.Snapshot()
		if status, _, got := get(t, c, fmt.Sprintf("http://127.0.0.1:%d%s", port, names[i])); status != 200 || !bytes.Equal(got, wants[i]) {
			t.Fatalf("resident %d: status %d, %d bytes", i, status, len(got))
		}
		after := transmit.Snapshot()
		ringFirst[i] = after.RingFirstBodies-before.RingFirstBodies == 1
		if d := after.ColdBodies - before.ColdBodies; d != 0 {
			t.Errorf("resident %d: ColdBodies +%d, want 0", i, d)
		}
	}
	t.Logf("resident: first read by the ring %v", ringFirst)
	for i := n - 8; i < n; i++ {
		if ringFirst[i] {
			t.Errorf("resident %d: after %d resident bodies, its first read was still the ring's; want a no-wait read", i, i)
		}
	}
}
