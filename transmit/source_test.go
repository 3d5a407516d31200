package transmit

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestFileSourceHead: the bytes inside Head come from memory and the rest
// from the file, so Head is what a response starts with. The file here
// differs from its head on purpose, to show which one each byte came from.
func TestFileSourceHead(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	onDisk := bytes.Repeat([]byte{'d'}, 2000)
	if err := os.WriteFile(p, onDisk, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := bytes.Repeat([]byte{'h'}, 512)
	for _, tc := range []struct {
		off, n int64
		want   string
	}{
		{0, 2000, string(head) + string(onDisk[512:])},
		{5, 600, string(head[5:]) + string(onDisk[512:605])},
		{100, 50, string(head[100:150])},
		{512, 10, string(onDisk[512:522])},
		{1990, 10, string(onDisk[1990:])},
	} {
		src := &FileSource{File: f, FD: int(f.Fd()), Off: tc.off, N: tc.n, Head: head}
		got, err := io.ReadAll(io.LimitReader(src, 1<<20))
		if err != nil || string(got) != tc.want {
			t.Errorf("off %d n %d: %d bytes (%v), want %d", tc.off, tc.n, len(got), err, len(tc.want))
		}
		if src.Sent != tc.n || src.N != 0 || src.Off != tc.off+tc.n {
			t.Errorf("off %d n %d: Sent %d N %d Off %d", tc.off, tc.n, src.Sent, src.N, src.Off)
		}
	}
	// A file shorter than promised is an error after the head too.
	src := &FileSource{File: f, Off: 0, N: 3000, Head: head}
	got, err := io.ReadAll(src)
	if !errors.Is(err, ErrTruncated) || len(got) != 2000 {
		t.Errorf("truncated: %d bytes, %v; want 2000 and ErrTruncated", len(got), err)
	}
}
