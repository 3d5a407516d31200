//go:build linux && !flashserve_portable

package transmit

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"syscall"
	"testing"
)

// TestOneFallbackRule: a ring read that failed for the ring's own reasons
// is read again, whole, with pread and counted; a failure of the file, or
// any failure once the request has ended, is returned as it is.
func TestOneFallbackRule(t *testing.T) {
	f, want := testFile(t, 64<<10)
	fd := int(f.Fd())
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	diskErr := &fs.PathError{Op: "io_uring read", Path: "fd", Err: syscall.EIO}
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		err    error
		redone bool
	}{
		{"ring closed", context.Background(), errRingClosed, true},
		{"cancelled by the kernel", context.Background(), &fs.PathError{Op: "io_uring read", Path: "fd", Err: syscall.ECANCELED}, true},
		{"no memory in the kernel", context.Background(), &fs.PathError{Op: "io_uring read", Path: "fd", Err: syscall.ENOMEM}, true},
		{"disk error", context.Background(), diskErr, false},
		{"request ended", context.Background(), context.Canceled, false},
		{"ring closed after the request ended", ended, errRingClosed, false},
		{"no error", context.Background(), nil, false},
	} {
		buf := make([]byte, 10000)
		before := Snapshot().RingFallbacks
		n, err, redone := preadIfRingFailed(tc.ctx, fd, buf, 100, 7, tc.err)
		counted := Snapshot().RingFallbacks - before
		if redone != tc.redone {
			t.Errorf("%s: redone %v, want %v", tc.name, redone, tc.redone)
			continue
		}
		if !redone {
			if n != 7 || !errors.Is(err, tc.err) && err != tc.err || counted != 0 {
				t.Errorf("%s: %d, %v, %d counted; want the ring's 7, %v and nothing counted", tc.name, n, err, counted, tc.err)
			}
			continue
		}
		if n != len(buf) || err != nil || !bytes.Equal(buf, want[100:100+len(buf)]) || counted != 1 {
			t.Errorf("%s: pread gave %d bytes, %v (content right: %v), %d counted; want %d, nil, 1", tc.name, n, err,
				bytes.Equal(buf[:n], want[100:100+n]), counted, len(buf))
		}
	}
	// At the end of the file pread stops short without an error, as the
	// ring's reads do.
	buf := make([]byte, 200)
	if n, err, _ := preadIfRingFailed(context.Background(), fd, buf, int64(len(want))-50, 0, errRingClosed); n != 50 || err != nil {
		t.Errorf("redone read at the end of the file: %d, %v; want 50, nil", n, err)
	}
}
