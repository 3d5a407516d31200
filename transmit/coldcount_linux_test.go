//go:build linux && !flashserve_portable

package transmit

import (
	"bytes"
	"net/http/httptest"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// TestPartlyCachedSmallBodyCountsCold: a small body whose first pages are
// in the page cache and whose last are not met the disk, and counts once
// in ColdBodies, however the disk read of its last pages ends. The one
// no-wait read takes the cached pages and starts that disk read; it
// returns them alone (a short read) unless the disk answers within the
// call. After a short read the body goes the long way, and the probe
// there, a moment later, can find the pages the no-wait read started
// reading already in (this VM's disk answers in tens of microseconds): the
// no-wait read's answer, that it met the disk, must not be lost with it.
func TestPartlyCachedSmallBodyCountsCold(t *testing.T) {
	const size = noWaitMax
	const cached = 16 << 10
	f, want := testFile(t, size)
	fd := int(f.Fd())
	s := ringSender(t)
	body := fileBody{f}
	// seed reads the first pages in through a descriptor of its own that
	// reads what it asks for and no more (FADV_RANDOM), and reports
	// whether mincore then sees only them.
	seed := func() bool {
		g, err := os.Open(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		if err := unix.Fadvise(int(g.Fd()), 0, 0, unix.FADV_RANDOM); err != nil {
			t.Fatal(err)
		}
		if _, err := g.ReadAt(make([]byte, cached), 0); err != nil {
			t.Fatal(err)
		}
		p := pagecache.NewProbe(fd, true, size)
		n, err := p.Resident(0, size)
		return err == nil && n > 0 && n < size
	}
	const tries = 200
	var uncounted, setUp int
	for try := 1; try <= tries; try++ {
		evict(t, f)
		if !seed() {
			continue // the kernel brought in all or none of it: no case
		}
		setUp++
		before := Snapshot().ColdBodies
		w := httptest.NewRecorder()
		tr := &Transfer{Engine: EngineIOUring}
		sent, err := s.Send(w, httptest.NewRequest("GET", "/", nil), body, tr, 0, size)
		if err != nil || !bytes.Equal(w.Body.Bytes(), want) {
			t.Fatalf("Send: %v, %d bytes, equal %v", err, w.Body.Len(), bytes.Equal(w.Body.Bytes(), want))
		}
		if d := Snapshot().ColdBodies - before; d != 1 {
			uncounted++
			t.Logf("attempt %d: ColdBodies +%d; %d bytes copied, %d through the ring", try, d, sent[EngineCopy], sent[EngineIOUring])
		}
	}
	if setUp < tries/2 {
		t.Fatalf("only %d of %d attempts left the body partly cached: the test proves little", setUp, tries)
	}
	if uncounted != 0 {
		t.Errorf("%d of %d partly cached small bodies were not counted as cold bodies once", uncounted, setUp)
	}
}

// TestResidentRangeStartingReadaheadIsNotCold: a range the page cache
// holds whole is no cold body, though its no-wait read may start the
// kernel's readahead of what follows it: a reader of a large file in
// 64 KiB ranges (pdf.js's way) finds a page marked for readahead in a
// range every readahead window, and the read of that range submits the
// next window's disk reads. They are this thread's, and count in its
// blocks read in (pagecache.ReadNoWaitMetDisk says so), but the request
// waits for none of them. The descriptor is an ordinary one, as the
// server's are; ranges the page cache does not hold are read with a
// blocking read on it, as a reader before this one would have.
func TestResidentRangeStartingReadaheadIsNotCold(t *testing.T) {
	const size = 4 << 20
	const rng = 64 << 10
	f, want := testFile(t, size)
	fd := int(f.Fd())
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_NORMAL); err != nil {
		t.Fatal(err)
	}
	s := ringSender(t)
	body := fileBody{f}
	evict(t, f)
	buf := make([]byte, rng)
	var cold, resident, counted int
	for off := int64(0); off < size; off += rng {
		p := pagecache.NewProbe(fd, true, size)
		if n, err := p.Resident(off, rng); err != nil || n < rng {
			cold++
			if _, err := f.ReadAt(buf, off); err != nil {
				t.Fatal(err)
			}
			continue
		}
		resident++
		before := Snapshot().ColdBodies
		w := httptest.NewRecorder()
		if _, err := s.Send(w, httptest.NewRequest("GET", "/", nil), body, &Transfer{Engine: EngineIOUring}, off, rng); err != nil || !bytes.Equal(w.Body.Bytes(), want[off:off+rng]) {
			t.Fatalf("range at %d KiB: %v, equal %v", off>>10, err, bytes.Equal(w.Body.Bytes(), want[off:off+rng]))
		}
		if d := Snapshot().ColdBodies - before; d != 0 {
			counted++
			t.Logf("range at %d KiB, resident whole: ColdBodies +%d", off>>10, d)
		}
	}
	t.Logf("%d ranges of 64 KiB read cold first, %d resident, %d of those counted cold", cold, resident, counted)
	if resident < size/rng/2 {
		t.Fatalf("only %d of %d ranges were resident when asked: the test proves little", resident, size/rng)
	}
	if counted != 0 {
		t.Errorf("%d ranges the page cache held whole were counted as cold bodies (the readahead their reads started)", counted)
	}
}
