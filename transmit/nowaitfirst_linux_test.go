//go:build linux && !flashserve_portable

package transmit

import (
	"bytes"
	"context"
	"os"
	"runtime"
	"testing"

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// evictedFiles makes n files of size bytes whose pages mincore finds out
// of the page cache: a file this VM will not let go of within three
// evictions is replaced by a fresh one.
func evictedFiles(t *testing.T, n, size int) ([]*os.File, [][]byte) {
	t.Helper()
	files, wants := make([]*os.File, n), make([][]byte, n)
	for i := range files {
		files[i], wants[i] = testFile(t, size)
		evictVerified(t, &files[i], &wants[i], size)
	}
	return files, wants
}

// evictVerified evicts *f until mincore finds none of it resident, and
// replaces it with a fresh file if it stays resident.
func evictVerified(t *testing.T, f **os.File, want *[]byte, size int) {
	t.Helper()
	for try := 0; ; try++ {
		evict(t, *f)
		if n, err := pagecache.Count(int((*f).Fd()), int64(size)); err != nil {
			t.Fatal(err)
		} else if n == 0 {
			return
		}
		if try == 2 {
			t.Logf("a file stayed in the page cache after 3 evictions: a fresh one")
			*f, *want = testFile(t, size)
			try = -1
		}
	}
}

// TestNoWaitFirstTellsColdReads: a read with a no-wait half
// (readOptions.NoWaitFirst) returns the file's bytes and says whether they
// were in the page cache, as a no-wait read of its own would: 64
// concurrent reads of evicted files each say MetDisk, and share few
// io_uring_enter calls with their halves; the same reads again, now
// resident, say none. A lone read of an evicted file, entered by itself
// (the batch padded so that the kernel plugs the disk), says MetDisk
// every time: its no-wait half cannot race the disk read it started.
func TestNoWaitFirstTellsColdReads(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	r, err := newRing(ringOptions{Entries: 256, Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	if !r.NoWaitFirst() {
		t.Skip("this kernel has no IOSQE_CQE_SKIP_SUCCESS (Linux 5.17): reads have no no-wait half")
	}
	const readers, size = 64, 8192
	files, wants := evictedFiles(t, readers, size)
	for _, pass := range []string{"cold", "resident"} {
		// How many enters a burst takes depends on when its completions
		// and sysmon's netpoll land (a completion that returns before
		// the burst is queued makes the next read eager again, and one
		// descheduling splits a batch), so a burst over the bound is run
		// again, up to three times, on files evicted again for the cold
		// pass. Halves that took enters of their own would exceed it on
		// every try. Every try checks every read's bytes and MetDisk.
		for try := 1; ; try++ {
			enters := noWaitFirstBurst(t, r, pass, files, wants)
			if enters*8 <= readers {
				break
			}
			if try == 3 {
				t.Errorf("%s: %d concurrent reads took %d io_uring_enter calls on the third try; want at most %d", pass, readers, enters, readers/8)
				break
			}
			t.Logf("%s: %d concurrent reads took %d io_uring_enter calls; want at most %d: again", pass, readers, enters, readers/8)
			if pass == "cold" {
				for i := range files {
					evictVerified(t, &files[i], &wants[i], size)
				}
			}
		}
	}
	for i := range 16 {
		evictVerified(t, &files[i], &wants[i], size)
		enters0 := r.counts().enters.Load()
		buf := make([]byte, size)
		o := readOptions{NoWaitFirst: true}
		n, err := r.readFull(context.Background(), int(files[i].Fd()), buf, 0, &o)
		if err != nil || n != size || !bytes.Equal(buf, wants[i]) {
			t.Fatalf("lone read %d: %d bytes, %v", i, n, err)
		}
		if enters := r.counts().enters.Load() - enters0; !o.MetDisk || enters != 1 {
			t.Errorf("lone read %d of an evicted file: MetDisk %v in %d io_uring_enter calls; want true in 1", i, o.MetDisk, enters)
		}
	}
}

// noWaitFirstBurst reads every file at once through r, each read with a
// no-wait half, checks each read's bytes and MetDisk (true on the cold
// pass, false on the resident one) and the ring's counts, and returns
// the io_uring_enter calls the burst took.
func noWaitFirstBurst(t *testing.T, r *Ring, pass string, files []*os.File, wants [][]byte) int64 {
	t.Helper()
	readers := int64(len(files))
	enters0, entered0, halves0, met0 := r.counts().enters.Load(), r.counts().entered.Load(), r.counts().noWaitFirst.Load(), r.counts().metDisk.Load()
	readTogether(len(files), func(g int) {
		buf := make([]byte, len(wants[g]))
		o := readOptions{NoWaitFirst: true}
		n, err := r.readFull(context.Background(), int(files[g].Fd()), buf, 0, &o)
		if err != nil || n != len(buf) || !bytes.Equal(buf, wants[g]) {
			t.Errorf("%s: read of file %d: %d bytes, %v", pass, g, n, err)
		}
		if o.MetDisk != (pass == "cold") {
			t.Errorf("%s: read of file %d: MetDisk %v", pass, g, o.MetDisk)
		}
		if o.NoWaitFirst {
			t.Errorf("%s: read of file %d left NoWaitFirst set", pass, g)
		}
	})
	enters, entered := r.counts().enters.Load()-enters0, r.counts().entered.Load()-entered0
	halves, met := r.counts().noWaitFirst.Load()-halves0, r.counts().metDisk.Load()-met0
	t.Logf("%s: %d reads, %d with a no-wait half, %d met the disk, in %d io_uring_enter calls", pass, entered, halves, met, enters)
	if entered != readers || halves != readers {
		t.Errorf("%s: %d reads entered, %d with a no-wait half; want %d each", pass, entered, halves, readers)
	}
	if want := map[string]int64{"cold": readers, "resident": 0}[pass]; met != want {
		t.Errorf("%s: %d no-wait halves failed, want %d", pass, met, want)
	}
	return enters
}
