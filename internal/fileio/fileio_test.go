package fileio

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"
)

// TestIsFDExhaustion: EMFILE and ENFILE, however wrapped, say the fd
// table is full; other errors do not.
func TestIsFDExhaustion(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{syscall.EMFILE, true},
		{syscall.ENFILE, true},
		{&fs.PathError{Op: "open", Path: "/x", Err: syscall.EMFILE}, true},
		{fmt.Errorf("batch: %w", &fs.PathError{Op: "open", Path: "/x", Err: syscall.ENFILE}), true},
		{syscall.ENOENT, false},
		{errors.New("too many open files"), false},
		{nil, false},
	} {
		if got := IsFDExhaustion(c.err); got != c.want {
			t.Errorf("IsFDExhaustion(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
