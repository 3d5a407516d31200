//go:build linux && !flashserve_portable

package transmit

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// blindBody is a Body mincore does not tell this process about: it is
// probed with no-wait reads.
type blindBody struct{ fileBody }

func (blindBody) MincoreTrusted() bool { return false }

// TestMissingSpanIsNotProbedAgain: where the handler's probe of the whole
// file has just found its data missing (Transfer.missingAt), the span
// that holds it is read through the ring, without a second probe, and
// what comes before it is probed and leaves as resident data does. The
// file here is all resident, so that a second probe would send it all by
// copy, as no-wait reads would a moment after the first probe's read
// started the kernel reading the page in.
func TestMissingSpanIsNotProbedAgain(t *testing.T) {
	const size = 6<<20 + 100
	f, want := testFile(t, size)
	s := ringSender(t)
	cases := []struct {
		name          string
		known         bool
		at            int64
		start, length int64
		ring          int64 // bytes through the ring
	}{
		{"no hint", false, 0, 0, size, 0},
		{"missing at 0", true, 0, 0, size, coldChunk},
		{"missing at 1 MiB, sent from 0", true, 1 << 20, 0, size, coldChunk},
		{"missing span 2-4 MiB, a range from 3 MiB", true, 2 << 20, 3 << 20, 1 << 20, coldChunk},
		{"missing at 5 MiB, a range before it", true, 5 << 20, 0, 4 << 20, 0},
		{"missing at 2 MiB, a range after its span", true, 2 << 20, 4 << 20, 1 << 20, 0},
	}
	for _, body := range []Body{fileBody{f}, blindBody{fileBody{f}}} {
		for _, c := range cases {
			name := fmt.Sprintf("%s, mincore trusted %v", c.name, body.MincoreTrusted())
			// A no-wait probe counts a resident span missing when its
			// goroutine changed threads or the VM paged a page out meanwhile
			// (a ring read too many): a case is sent again, up to 3 times,
			// and must come out exact once.
			for try := 1; ; try++ {
				w := httptest.NewRecorder()
				tr := &Transfer{Engine: EngineIOUring, missingAt: c.at, missingKnown: c.known}
				sent, err := s.Send(w, httptest.NewRequest("GET", "/", nil), body, tr, c.start, c.length)
				if err != nil || !bytes.Equal(w.Body.Bytes(), want[c.start:c.start+c.length]) {
					t.Fatalf("%s: %v, %d bytes, equal %v", name, err, w.Body.Len(), bytes.Equal(w.Body.Bytes(), want[c.start:c.start+c.length]))
				}
				if c.ring > 0 && tr.missingKnown {
					t.Errorf("%s: the hint is still set after the span it names was read", name)
				}
				if sent[EngineIOUring] == c.ring && sent[EngineCopy] == c.length-c.ring {
					break
				}
				if try == 3 || sent[EngineIOUring] < c.ring {
					t.Errorf("%s: %d bytes through the ring, %d copied; want %d and %d", name, sent[EngineIOUring], sent[EngineCopy], c.ring, c.length-c.ring)
					break
				}
				t.Logf("%s, attempt %d: %d bytes through the ring, %d more than the hint's span; again", name, try, sent[EngineIOUring], sent[EngineIOUring]-c.ring)
			}
		}
	}
}

// TestCachedSpanBeforeAColdOneLeavesAsResidentData: a file whose first
// 2 MiB are in the page cache and whose next 2 MiB are not, probed with
// no-wait reads, is found missing from 2 MiB (FirstMissing), and its
// first 2 MiB leave as resident data (copied here), not through the ring.
// An attempt after which mincore no longer sees the first 2 MiB (another
// process dropped the caches meanwhile) proves nothing and is made again.
func TestCachedSpanBeforeAColdOneLeavesAsResidentData(t *testing.T) {
	const span = residencyProbe
	const size = 2 * span
	f, want := testFile(t, size)
	fd := int(f.Fd())
	s := ringSender(t)
	body := blindBody{fileBody{f}}
	cachedPrefix := func() int64 {
		p := pagecache.NewProbe(fd, true, size)
		off, _ := p.FirstMissing(size, span)
		return off
	}
	// Reads bring in what they ask for and no more (no readahead).
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_RANDOM); err != nil {
		t.Fatal(err)
	}
	for try := 1; ; try++ {
		evict(t, f)
		if _, err := f.ReadAt(make([]byte, span), 0); err != nil {
			t.Fatal(err)
		}
		if n := cachedPrefix(); n != span {
			t.Fatalf("set up: mincore sees the first %d bytes cached, want %d: the test would prove nothing", n, span)
		}
		at, ok := firstMissing(body)
		if cachedPrefix() < span && try < 3 {
			t.Logf("attempt %d: the first span was evicted under the probe; again", try)
			continue
		}
		if at != span || !ok {
			t.Errorf("first 2 MiB cached, the rest not: firstMissing = %d, %v; want %d, true", at, ok, span)
		}
		w := httptest.NewRecorder()
		tr := &Transfer{Engine: EngineIOUring, missingAt: at, missingKnown: ok && at < size}
		sent, err := s.Send(w, httptest.NewRequest("GET", "/", nil), body, tr, 0, size)
		if err != nil || !bytes.Equal(w.Body.Bytes(), want) {
			t.Fatalf("Send: %v, %d bytes, equal %v", err, w.Body.Len(), bytes.Equal(w.Body.Bytes(), want))
		}
		if sent[EngineCopy] < span {
			t.Errorf("%d bytes copied, %d through the ring; want the cached first %d bytes copied", sent[EngineCopy], sent[EngineIOUring], span)
		}
		return
	}
}

// TestRingTransferStaysOnTheRing: a transfer the handler gave to the
// ring's engine keeps going there after a small range was read whole from
// the page cache (Engine then says copy, for the request's count): a
// later range of a multipart response, or a later chunk paced by
// limit_rate, that is on disk is read through the ring, not by a blocking
// pread.
func TestRingTransferStaysOnTheRing(t *testing.T) {
	const size = 4 << 20
	f, want := testFile(t, size)
	s := ringSender(t)
	fd := int(f.Fd())
	for try := 1; ; try++ {
		// The first 1 MiB cached, the rest not.
		f.Sync()
		if err := unix.Fadvise(fd, 1<<20, 0, unix.FADV_DONTNEED); err != nil {
			t.Fatal(err)
		}
		if _, err := f.ReadAt(make([]byte, 64<<10), 0); err != nil {
			t.Fatal(err)
		}
		p := pagecache.NewProbe(fd, true, size)
		if n, _ := p.Resident(2<<20, 1<<20); n != 0 {
			if try < 3 {
				continue
			}
			t.Fatalf("%d bytes of 2-3 MiB resident after DONTNEED: the test would prove nothing", n)
		}
		break
	}
	tr := &Transfer{Engine: EngineIOUring}
	w := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/", nil)
	sent, err := s.Send(w, req, fileBody{f}, tr, 0, 32<<10)
	if err != nil || sent[EngineCopy] != 32<<10 || tr.Engine != EngineCopy {
		t.Fatalf("a small cached range: %v, counts %v, engine %v; want 32 KiB copied and the engine copy", err, sent, tr.Engine)
	}
	sent, err = s.Send(w, req, fileBody{f}, tr, 2<<20, 1<<20)
	if err != nil || !bytes.Equal(w.Body.Bytes(), append(append([]byte(nil), want[:32<<10]...), want[2<<20:3<<20]...)) {
		t.Fatalf("the range on disk: %v, %d bytes", err, w.Body.Len())
	}
	if sent[EngineIOUring] == 0 {
		t.Errorf("the range on disk after a cached one: counts %v, want bytes through the ring", sent)
	}
}
