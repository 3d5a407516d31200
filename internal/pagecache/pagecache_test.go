package pagecache

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"
)

// TestShortRead: the one rule for a read that came back short, for int
// and int64 counts.
func TestShortRead(t *testing.T) {
	eio := syscall.EIO
	cases := []struct {
		name    string
		n, want int
		err     error
		verdict error
	}{
		{"all of it", 10, 10, nil, nil},
		{"all of it with io.EOF", 10, 10, io.EOF, nil},
		{"all of it with a failure", 10, 10, eio, nil},
		{"nothing asked", 0, 0, nil, nil},
		{"short without an error", 3, 10, nil, ErrTruncated},
		{"short at io.EOF", 3, 10, io.EOF, ErrTruncated},
		{"nothing at io.EOF", 0, 10, io.EOF, ErrTruncated},
		{"short at a wrapped io.EOF", 3, 10, fmt.Errorf("reading: %w", io.EOF), ErrTruncated},
		{"short at a failure", 3, 10, eio, eio},
		{"nothing at a failure", 0, 10, eio, eio},
	}
	for _, c := range cases {
		if got := ShortRead(c.n, c.want, c.err); !errors.Is(got, c.verdict) || (got == nil) != (c.verdict == nil) {
			t.Errorf("%s: ShortRead(%d, %d, %v) = %v, want %v", c.name, c.n, c.want, c.err, got, c.verdict)
		}
		if got := ShortRead(int64(c.n)<<32, int64(c.want)<<32, c.err); !errors.Is(got, c.verdict) || (got == nil) != (c.verdict == nil) {
			t.Errorf("%s, int64 past 4 GiB: ShortRead = %v, want %v", c.name, got, c.verdict)
		}
	}
}
