//go:build linux && !flashserve_portable

package transmit

import (
	"bytes"
	"errors"
	"net/http/httptest"
	"os"
	"testing"

	"go.uber.org/zap"
)

// TestRingSendTruncatedAndFailing: through the ring's engine, plain and
// file_server-shaped, a file cut short under the transfer ends the body
// with a ReadError of truncation after exactly the bytes it still has,
// and a ring that fails every read still sends the same bytes, counted
// as copy. The bytes of either are counted as they were sent.
func TestRingSendTruncatedAndFailing(t *testing.T) {
	const size = 1<<20 + 77
	f, want := testFile(t, size)
	r, err := newRing(ringOptions{})
	if err != nil {
		t.Fatalf("io_uring should work on this kernel: %v", err)
	}
	defer r.close()
	s := &Sender{Ring: r, Policy: PolicyIOUring, Logger: zap.NewNop()}
	body := fileBody{f}
	for _, fsw := range []bool{false, true} {
		// The ring failing every read: the same bytes, all by copy.
		r.injectFailures(1 << 20)
		w := httptest.NewRecorder()
		tr := &Transfer{Engine: EngineIOUring, FileServerWrites: fsw}
		sent, err := s.Send(w, httptest.NewRequest("GET", "/", nil), body, tr, 5, size-5)
		r.injectFailures(0)
		if err != nil || !bytes.Equal(w.Body.Bytes(), want[5:]) || sent[EngineCopy] != size-5 || sent[EngineIOUring] != 0 {
			t.Errorf("file_server writes %v, ring failing: %v, %d bytes (right: %v), counts %v", fsw, err,
				w.Body.Len(), bytes.Equal(w.Body.Bytes(), want[5:]), sent)
		}
	}
	// Truncated below what the response declared.
	const left = 300<<10 + 3
	if err := os.Truncate(f.Name(), left); err != nil {
		t.Fatal(err)
	}
	for _, fsw := range []bool{false, true} {
		w := httptest.NewRecorder()
		tr := &Transfer{Engine: EngineIOUring, FileServerWrites: fsw}
		sent, err := s.Send(w, httptest.NewRequest("GET", "/", nil), body, tr, 0, size)
		var re *ReadError
		if !errors.As(err, &re) || !errors.Is(err, errTruncated) {
			t.Errorf("file_server writes %v, truncated: error %v, want a ReadError of truncation", fsw, err)
		}
		if !bytes.Equal(w.Body.Bytes(), want[:min(w.Body.Len(), left)]) || w.Body.Len() > left {
			t.Errorf("file_server writes %v, truncated: %d bytes written, not a prefix of the %d left", fsw, w.Body.Len(), left)
		}
		var counted int64
		for _, n := range sent {
			counted += n
		}
		if counted != int64(w.Body.Len()) {
			t.Errorf("file_server writes %v, truncated: %d bytes written, %d counted (%v)", fsw, w.Body.Len(), counted, sent)
		}
		t.Logf("file_server writes %v, truncated: %d bytes written, counts %v, %v", fsw, w.Body.Len(), sent, err)
	}
}
