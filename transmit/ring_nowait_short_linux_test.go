//go:build linux && !flashserve_portable

package transmit

import (
	"bytes"
	"context"
	"testing"

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
	"golang.org/x/sys/unix"
)

// TestNoWaitHalfShortSaysMetDisk: a read with a no-wait half of a body
// whose first half is resident and second half evicted waits for the disk
// for the second half; its no-wait half, which stops short at the first
// missing page (a success, not a failure), must still say MetDisk.
func TestNoWaitHalfShortSaysMetDisk(t *testing.T) {
	r, err := newRing(ringOptions{Entries: 16, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	if !r.NoWaitFirst() {
		t.Skip("no IOSQE_CQE_SKIP_SUCCESS")
	}
	const size = 64 << 10
	for try := range 8 {
		f, want := testFile(t, size)
		evict(t, f)
		if _, err := f.ReadAt(make([]byte, size/2), 0); err != nil {
			t.Fatal(err)
		}
		unix.Fadvise(int(f.Fd()), size/2, size/2, unix.FADV_DONTNEED)
		head, _ := pagecache.Count(int(f.Fd()), size/2)
		all, _ := pagecache.Count(int(f.Fd()), size)
		if head == 0 || all == size {
			t.Logf("try %d: %d bytes of the first half, %d of all resident: again", try, head, all)
			continue
		}
		buf := make([]byte, size)
		o := readOptions{NoWaitFirst: true}
		n, err := r.readFull(context.Background(), int(f.Fd()), buf, 0, &o)
		if err != nil || n != size || !bytes.Equal(buf, want) {
			t.Fatalf("read: %d, %v", n, err)
		}
		t.Logf("%d of %d bytes resident before the read: MetDisk %v", all, size, o.MetDisk)
		if !o.MetDisk {
			t.Errorf("a read whose second half met the disk: MetDisk false")
		}
		return
	}
	t.Skip("could not make a half-resident file")
}
