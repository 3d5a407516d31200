//go:build linux && !flashserve_portable

package transmit

import (
	"bytes"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap"
)

// TestRingClosedUnderAReadSendsTheBody: a ring that closes while a body's
// read is in the kernel (a reload to a config that holds no ring, while
// the old server still sends) lets go of the read, and the response goes
// on with pread: the whole body, not one cut after its headers. The FUSE
// file holds its reads until the pread has reached it too.
func TestRingClosedUnderAReadSendsTheBody(t *testing.T) {
	const size = 256 << 10
	slow := &fuseFile{size: size, direct: true, block: make(chan struct{})}
	mnt := mountFUSE(t, map[string]*fuseFile{"slow.bin": slow})
	f := openFUSE(t, mnt, "slow.bin")
	want := make([]byte, size)
	for i := range want {
		want[i] = fuseByte(int64(i))
	}
	r, err := newRing(ringOptions{Workers: 4})
	if err != nil {
		t.Fatalf("io_uring should work on this kernel: %v", err)
	}
	s := &Sender{Ring: r, Policy: PolicyIOUring, Logger: zap.NewNop()}
	w := httptest.NewRecorder()
	type result struct {
		sent Counts
		err  error
	}
	done := make(chan result, 1)
	go func() {
		sent, err := s.Send(w, httptest.NewRequest("GET", "/slow.bin", nil), fileBody{f}, &Transfer{Engine: EngineIOUring}, 0, size)
		done <- result{sent, err}
	}()
	if !waitFor(10*time.Second, func() bool { return slow.blocked.Load() == 1 }) {
		t.Fatalf("%d reads in the FUSE server, want the body's first", slow.blocked.Load())
	}
	closed := make(chan error, 1)
	go func() { closed <- r.close() }()
	// The ring's read is let go of, and the body's pread reaches the
	// server: a second read.
	if !waitFor(10*time.Second, func() bool { return slow.started.Load() >= 2 }) {
		close(slow.block)
		res := <-done
		t.Fatalf("no read after the ring closed: Send returned %v after %d bytes", res.err, w.Body.Len())
	}
	close(slow.block)
	select {
	case res := <-done:
		if res.err != nil || !bytes.Equal(w.Body.Bytes(), want) {
			t.Fatalf("Send with the ring closed under its read: %v, %d bytes (exact: %v); want the whole %d",
				res.err, w.Body.Len(), bytes.Equal(w.Body.Bytes(), want), size)
		}
		t.Logf("counts %v", res.sent)
	case <-time.After(20 * time.Second):
		t.Fatal("Send still running 20 s after the FUSE server let its reads go")
	}
	if err := <-closed; err != nil {
		t.Errorf("the ring's close: %v", err)
	}
}
