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
		src := &fileSource{File: f, FD: int(f.Fd()), Off: tc.off, N: tc.n, Head: head}
		got, err := io.ReadAll(io.LimitReader(src, 1<<20))
		if err != nil || string(got) != tc.want {
			t.Errorf("off %d n %d: %d bytes (%v), want %d", tc.off, tc.n, len(got), err, len(tc.want))
		}
		if src.Sent != tc.n || src.N != 0 || src.Off != tc.off+tc.n {
			t.Errorf("off %d n %d: Sent %d N %d Off %d", tc.off, tc.n, src.Sent, src.N, src.Off)
		}
	}
	// A file shorter than promised is an error after the head too.
	src := &fileSource{File: f, Off: 0, N: 3000, Head: head}
	got, err := io.ReadAll(src)
	if !errors.Is(err, errTruncated) || len(got) != 2000 {
		t.Errorf("truncated: %d bytes, %v; want 2000 and errTruncated", len(got), err)
	}
}

// TestFileSourceReadTurn: with ReadTurn set, Read reports io.EOF after
// that many bytes until StartTurn, so that a copying writer chain returns
// to its caller once per turn; the bytes of all turns are the body.
func TestFileSourceReadTurn(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	data := bytes.Repeat([]byte("0123456789"), 1000)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	src := &fileSource{File: f, FD: int(f.Fd()), Off: 5, N: 9000, Head: data[:512], ReadTurn: 4096}
	var got []byte
	var turns []int
	for src.N > 0 && len(turns) < 10 {
		src.StartTurn()
		b, err := io.ReadAll(src)
		if err != nil {
			t.Fatal(err)
		}
		turns = append(turns, len(b))
		got = append(got, b...)
	}
	if !bytes.Equal(got, data[5:9005]) || len(turns) != 3 || turns[0] != 4096 || turns[1] != 4096 || src.Sent != 9000 {
		t.Errorf("turns %v, %d bytes (exact: %v), Sent %d; want 4096, 4096, 808 of the body", turns, len(got), bytes.Equal(got, data[5:9005]), src.Sent)
	}
}
