package transmit

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestFileSourceReadsTheFile: every byte of a body comes from the file
// as it is when it is read, from any offset, including the first 512
// bytes that net/http copies itself (nothing kept of the file earlier is
// spliced with them); a file shorter than promised is an error.
func TestFileSourceReadsTheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	onDisk := bytes.Repeat([]byte("0123456789"), 200)
	if err := os.WriteFile(p, onDisk, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tc := range []struct{ off, n int64 }{{0, 2000}, {5, 600}, {100, 50}, {512, 10}, {1990, 10}} {
		src := &fileSource{File: f, FD: int(f.Fd()), Off: tc.off, N: tc.n}
		got, err := io.ReadAll(io.LimitReader(src, 1<<20))
		if err != nil || !bytes.Equal(got, onDisk[tc.off:tc.off+tc.n]) {
			t.Errorf("off %d n %d: %d bytes (%v), want %d of the file", tc.off, tc.n, len(got), err, tc.n)
		}
		if src.Sent != tc.n || src.N != 0 || src.Off != tc.off+tc.n {
			t.Errorf("off %d n %d: Sent %d N %d Off %d", tc.off, tc.n, src.Sent, src.N, src.Off)
		}
	}
	// Changed between two reads of one body: the second read has the new
	// bytes, the first the old ones, as file_server's reads would.
	src := &fileSource{File: f, FD: int(f.Fd()), Off: 0, N: 1000}
	first := make([]byte, 512)
	if n, err := src.Read(first); n != 512 || err != nil || !bytes.Equal(first, onDisk[:512]) {
		t.Fatalf("first read: %d, %v", n, err)
	}
	changed := bytes.Repeat([]byte{'x'}, len(onDisk))
	if _, err := f.WriteAt(changed, 0); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(src)
	if err != nil || !bytes.Equal(rest, changed[512:1000]) {
		t.Errorf("after the change: %d bytes (%v), want the new bytes 512-999", len(rest), err)
	}
	// A file shorter than promised is an error.
	src = &fileSource{File: f, Off: 0, N: 3000}
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
	src := &fileSource{File: f, FD: int(f.Fd()), Off: 5, N: 9000, ReadTurn: 4096}
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
