//go:build linux && !flashserve_portable

package transmit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// stallingWriter is a ResponseWriter whose every Write waits until
// release is closed, as a write to a client that does not read does; it
// records the largest buffer it was handed (what it holds while waiting).
type stallingWriter struct {
	header  http.Header
	entered chan struct{} // receives once per Write, as it starts waiting
	release chan struct{}
	mu      sync.Mutex
	body    bytes.Buffer
	largest int
	// free is how many Writes pass, before the first that waits.
	free int
}

func newStallingWriter() *stallingWriter {
	return &stallingWriter{header: http.Header{}, entered: make(chan struct{}, 1<<10), release: make(chan struct{})}
}

func (w *stallingWriter) Header() http.Header { return w.header }
func (w *stallingWriter) WriteHeader(int)     {}

func (w *stallingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.free > 0 {
		w.free--
		defer w.mu.Unlock()
		return w.body.Write(p)
	}
	w.largest = max(w.largest, len(p))
	w.mu.Unlock()
	w.entered <- struct{}{}
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.body.Write(p)
}

// TestColdTokensNotHeldAcrossClientWrites: whichever way a cold body goes
// through the ring (a small body read whole, with or without a no-wait
// half, a large one a window at a time, every byte through the ring, or
// written as file_server writes it), over HTTP/1.1 and HTTP/2, a write
// to a client that does not read holds no token of the cold reads'
// budget, and what it holds is at most noWaitMax bytes; once the client
// reads, the body is exact.
func TestColdTokensNotHeldAcrossClientWrites(t *testing.T) {
	small, smallWant := testFile(t, 16<<10)
	large, largeWant := testFile(t, 1<<20+77)
	s := ringSender(t)
	cases := []struct {
		name      string
		body      fileBody
		want      []byte
		ringOnly  bool
		ringFirst bool
		fsw       bool
	}{
		{"small body", fileBody{small}, smallWant, false, false, false},
		{"small body with a no-wait half", fileBody{small}, smallWant, false, true, false},
		{"small body, ring only", fileBody{small}, smallWant, true, false, false},
		{"large body", fileBody{large}, largeWant, false, false, false},
		{"large body, ring only", fileBody{large}, largeWant, true, false, false},
		{"small body as file_server writes", fileBody{small}, smallWant, false, false, true},
		{"large body as file_server writes", fileBody{large}, largeWant, false, false, true},
		{"large body as file_server writes, ring only", fileBody{large}, largeWant, true, false, true},
	}
	for _, c := range cases {
		for _, proto := range []int{1, 2} {
			name := fmt.Sprintf("%s, HTTP/%d", c.name, proto)
			evict(t, c.body.f)
			s.setRingOnly(c.ringOnly)
			s.firstReads.score = 0
			if c.ringFirst {
				s.firstReads.score = firstReadsMax
			}
			w := newStallingWriter()
			r := httptest.NewRequest("GET", "/", nil)
			r.ProtoMajor = proto
			tr := &Transfer{Engine: EngineIOUring, FileServerWrites: c.fsw}
			done := make(chan error, 1)
			go func() {
				_, err := s.Send(w, r, c.body, tr, 0, int64(len(c.want)))
				done <- err
			}()
			select {
			case <-w.entered:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: no write within 10 s", name)
			}
			if n := len(coldBudget); n != 0 {
				t.Errorf("%s: %d tokens of the cold budget held while the client does not read", name, n)
			}
			close(w.release)
			if err := <-done; err != nil {
				t.Errorf("%s: %v", name, err)
			}
			if !bytes.Equal(w.body.Bytes(), c.want) {
				t.Errorf("%s: %d bytes, not the file's %d", name, w.body.Len(), len(c.want))
			}
			if w.largest > noWaitMax {
				t.Errorf("%s: a write was handed %d bytes, more than noWaitMax", name, w.largest)
			}
			if n := len(coldBudget); n != 0 {
				t.Errorf("%s: %d tokens still held after the body", name, n)
			}
		}
	}
	s.setRingOnly(false)
}

// fuseFileBody is a fileBody of a file without a block device.
type fuseFileBody struct{ fileBody }

func (fuseFileBody) NoBlockDevice() bool { return true }

// TestFileServerWritesLetGoOfStalledReads: a body written as file_server
// writes it (under encode) whose ring read hangs (a FUSE file that does
// not answer) ends when its request does, without waiting for the read;
// the read's buffer and token stay the ring's until the read completes,
// and then everything is given back.
func TestFileServerWritesLetGoOfStalledReads(t *testing.T) {
	files := map[string]*fuseFile{}
	for _, name := range []string{"auto.bin", "ring.bin"} {
		files[name] = &fuseFile{size: 1 << 20, direct: true, block: make(chan struct{}), ignoreCancel: true}
	}
	mnt := mountFUSE(t, files)
	s := ringSender(t)
	for _, ringOnly := range []bool{false, true} {
		name := map[bool]string{false: "auto.bin", true: "ring.bin"}[ringOnly]
		hang := files[name]
		f := openFUSE(t, mnt, name)
		s.setRingOnly(ringOnly)
		ctx, cancel := context.WithCancel(context.Background())
		r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
		w := httptest.NewRecorder()
		done := make(chan error, 1)
		go func() {
			_, err := s.Send(w, r, fuseFileBody{fileBody{f}}, &Transfer{Engine: EngineIOUring, FileServerWrites: true}, 0, hang.size)
			done <- err
		}()
		if !waitFor(10*time.Second, func() bool { return hang.blocked.Load() == 1 }) {
			t.Fatalf("ring only %v: the read did not reach the FUSE server", ringOnly)
		}
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("ring only %v: the request ended with %v, want its context's end", ringOnly, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("ring only %v: the body did not end within 5 s of its request", ringOnly)
		}
		if n := len(coldBudget); n != 1 {
			t.Errorf("ring only %v: %d tokens held with one read left to the ring, want 1", ringOnly, n)
		}
		close(hang.block) // the read completes
		if !waitFor(10*time.Second, func() bool { ops, files := s.Ring.busy(); return ops == 0 && files == 0 && len(coldBudget) == 0 }) {
			ops, files := s.Ring.busy()
			t.Errorf("ring only %v: after the read completed: %d operations, %d files, %d tokens", ringOnly, ops, files, len(coldBudget))
		}
	}
	s.setRingOnly(false)
}

// TestEmptyBodyThroughTheRing: an empty file (or range) sent by the ring's
// engine, every way, writes nothing and ends without an error.
func TestEmptyBodyThroughTheRing(t *testing.T) {
	f, _ := testFile(t, 0)
	s := ringSender(t)
	for _, ringOnly := range []bool{false, true} {
		for _, fsw := range []bool{false, true} {
			s.setRingOnly(ringOnly)
			w := httptest.NewRecorder()
			sent, err := s.Send(w, httptest.NewRequest("GET", "/", nil), fileBody{f}, &Transfer{Engine: EngineIOUring, FileServerWrites: fsw}, 0, 0)
			if err != nil || w.Body.Len() != 0 || sent != (Counts{}) {
				t.Errorf("ring only %v, file_server writes %v: %v, %d bytes, counts %v", ringOnly, fsw, err, w.Body.Len(), sent)
			}
		}
	}
	s.setRingOnly(false)
}

// heapInUse is the heap in use after two collections: the second frees
// what the pools kept through the first.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestStalledColdBodyHoldsOneBuffer: while its client does not read, a
// response whose body comes from the ring holds one buffer of the body's
// size or of the copy buffer's, the one its waiting write was handed: a
// small body whose first no-wait read found it missing is read through
// the ring into a buffer of its own, and the no-wait read's buffer goes
// back; a large one whose last bytes are read into a buffer of their own,
// or copied from the page cache, after its first window, does not keep
// the copy buffer of that window meanwhile. 100 responses of each wait
// for their clients: the heap they hold is under 1.5 buffers of 64 KiB
// each.
func TestStalledColdBodyHoldsOneBuffer(t *testing.T) {
	const n = 100
	s := ringSender(t)
	for _, c := range []struct {
		name string
		size int
		free int // the writes before the one that waits
	}{
		{"small body, no-wait read first", 48 << 10, 0},
		{"the end of a large body, after its first window", coldChunk + 48<<10, 4},
	} {
		dir := t.TempDir()
		files := make([]fileBody, n)
		for i := range files {
			p := filepath.Join(dir, fmt.Sprint(i))
			if err := os.WriteFile(p, make([]byte, c.size), 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			evict(t, f)
			files[i] = fileBody{f}
		}
		writers := make([]*stallingWriter, n)
		for i := range writers {
			writers[i] = newStallingWriter()
			writers[i].free = c.free
			writers[i].body.Grow(c.size) // not counted in what the responses hold
		}
		before := heapInUse()
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := httptest.NewRequest("GET", "/", nil)
				tr := &Transfer{Engine: EngineIOUring}
				// A sender of its own, whose first reads have all found the
				// page cache warm: a small body's no-wait read goes first.
				own := &Sender{Ring: s.Ring, Logger: s.Logger}
				if _, err := own.Send(writers[i], r, files[i], tr, 0, int64(c.size)); err != nil {
					t.Errorf("%s: %v", c.name, err)
				}
			}()
		}
		for i, w := range writers {
			select {
			case <-w.entered:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s, response %d: no waiting write within 10 s", c.name, i)
			}
		}
		held := heapInUse() - before
		for _, w := range writers {
			close(w.release)
		}
		wg.Wait()
		for i, w := range writers {
			if w.body.Len() != c.size {
				t.Errorf("%s, response %d: %d bytes, want %d", c.name, i, w.body.Len(), c.size)
			}
		}
		perResponse := held / n
		t.Logf("%s: %d waiting responses hold %d KiB of heap, %d KiB each", c.name, n, held>>10, perResponse>>10)
		if perResponse > 96<<10 {
			t.Errorf("%s: each waiting response holds %d KiB, more than one 64 KiB buffer and a half", c.name, perResponse>>10)
		}
	}
}
