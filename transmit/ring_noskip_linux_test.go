//go:build linux && !flashserve_portable

package transmit

import (
	"bytes"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestRingFirstWithoutSkipSuccess: on a kernel without
// IOSQE_CQE_SKIP_SUCCESS (simulated: the ring's probe flag cleared), a
// score that asks for ring-first reads still reads small bodies of
// evicted files with a no-wait read of their own: the right bytes, none
// ring first, each counted cold once.
func TestRingFirstWithoutSkipSuccess(t *testing.T) {
	s := ringSender(t)
	s.Ring.skipCQE = false
	const n, size = 16, 8192
	files, wants := evictedFiles(t, n, size)
	rf0, cold0, halves0 := stats.ringFirstBodies.Load(), stats.coldBodies.Load(), s.Ring.counts().noWaitFirst.Load()
	for i, f := range files {
		atomic.StoreInt32(&s.firstReads.score, firstReadsMax)
		w := httptest.NewRecorder()
		if _, err := s.Send(w, httptest.NewRequest("GET", "/", nil), fileBody{f}, &Transfer{Engine: EngineIOUring}, 0, size); err != nil || !bytes.Equal(w.Body.Bytes(), wants[i]) {
			t.Fatalf("file %d: %v, %d bytes", i, err, w.Body.Len())
		}
	}
	rf, cold, halves := stats.ringFirstBodies.Load()-rf0, stats.coldBodies.Load()-cold0, s.Ring.counts().noWaitFirst.Load()-halves0
	t.Logf("%d ring first, %d no-wait halves, %d cold bodies", rf, halves, cold)
	if rf != 0 || halves != 0 || cold != n {
		t.Errorf("%d ring first, %d halves, %d cold; want 0, 0, %d", rf, halves, cold, n)
	}
}
