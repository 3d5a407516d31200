package statacc

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestMissOpensFirstSafely: a miss opens the path before it knows what it
// is, so what is not a regular file must come back described and without
// a descriptor in every symlinks mode: a FIFO without a writer (the open
// must not wait for one), a socket (which cannot be opened), and a
// directory the server may search but not read (which cannot be opened
// for reading, and is still a directory; as root, which reads it anyway,
// that case only checks the type).
func TestMissOpensFirstSafely(t *testing.T) {
	root := t.TempDir()
	fifo := filepath.Join(root, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(root, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := filepath.Join(root, "noread")
	if err := os.Mkdir(dir, 0o311); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "file")
	write(t, file, "body")
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	defer c.Close()
	for _, mode := range []Symlinks{SymlinksFollow, SymlinksDeny, SymlinksBeneath} {
		for _, tc := range []struct {
			path string
			want os.FileMode
		}{{fifo, os.ModeNamedPipe}, {sock, os.ModeSocket}, {dir, os.ModeDir}, {file, 0}} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			start := time.Now()
			e, err := c.getConfined(ctx, root, mode, tc.path)
			cancel()
			if err != nil {
				t.Errorf("%v %s: %v after %v", mode, filepath.Base(tc.path), err, time.Since(start))
				continue
			}
			if got := e.fileMode.Type(); got != tc.want {
				t.Errorf("%v %s: type %v, want %v", mode, filepath.Base(tc.path), got, tc.want)
			}
			if regular := tc.want == 0; (e.File() != nil) != regular {
				t.Errorf("%v %s: descriptor held %v, want %v", mode, filepath.Base(tc.path), e.File() != nil, regular)
			}
			e.Release()
		}
	}
}
