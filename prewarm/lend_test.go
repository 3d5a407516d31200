package prewarm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestLentBufferIsLeftAlone: a reader that lets go of a read while its
// context is still alive (a ring closed under a running warm-up hands the
// buffer and the file to the ring, and says ErrRingClosed) owns them
// until its release: readPrefix must neither read into that buffer again
// (with pread or the reader) nor close the file; the release does both.
func TestLentBufferIsLeftAlone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	writeSynced(t, path, 3<<20)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var lentBuf []byte
	var release func()
	calls, callsAfterLending := 0, 0
	readAt := func(ctx context.Context, fd int, buf []byte, off int64, hold func() func()) (int, error) {
		calls++
		if release != nil {
			callsAfterLending++
			return 0, errors.New("ring closed")
		}
		// What the kernel still writes into the buffer, as a marker.
		for i := range buf {
			buf[i] = 0xAA
		}
		lentBuf = buf
		release = hold()
		return 0, errors.New("ring closed")
	}
	readPrefix(context.Background(), nil, f, 3<<20, readAt)
	if release == nil {
		t.Fatal("the reader was not called with hold")
	}
	for i, b := range lentBuf {
		if b != 0xAA {
			t.Fatalf("byte %d of the lent buffer was written after it was lent (%#x)", i, b)
		}
	}
	if callsAfterLending > 0 {
		t.Errorf("%d reads after the buffer was lent", callsAfterLending)
	}
	if _, err := f.Stat(); err != nil {
		t.Fatalf("the file was closed before the lent read completed: %v", err)
	}
	release()
	if _, err := f.Stat(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("the release did not close the file: %v", err)
	}
}
