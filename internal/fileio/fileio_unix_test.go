//go:build unix

package fileio

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestReadAtReadsWholeOrStopsAtTheEnd: ReadAt fills the buffer where the
// file has the bytes, and where it ends first returns what there was with
// io.EOF; a failed pread is its errno.
func TestReadAtReadsWholeOrStopsAtTheEnd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	data := []byte("0123456789")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	buf := make([]byte, 4)
	if n, err := ReadAt(fd, buf, 3); n != 4 || err != nil || string(buf) != "3456" {
		t.Errorf("ReadAt(4 at 3) = %d, %v, %q; want 4, nil, \"3456\"", n, err, buf[:n])
	}
	buf = make([]byte, 8)
	if n, err := ReadAt(fd, buf, 6); n != 4 || err != io.EOF || string(buf[:n]) != "6789" {
		t.Errorf("ReadAt(8 at 6) = %d, %v, %q; want 4, io.EOF, \"6789\"", n, err, buf[:n])
	}
	if n, err := ReadAt(fd, buf, 10); n != 0 || err != io.EOF {
		t.Errorf("ReadAt at the end = %d, %v; want 0, io.EOF", n, err)
	}
	if n, err := ReadAt(fd, nil, 0); n != 0 || err != nil {
		t.Errorf("ReadAt of nothing = %d, %v; want 0, nil", n, err)
	}
	dir, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	if _, err := ReadAt(int(dir.Fd()), buf, 0); !errors.Is(err, syscall.EISDIR) {
		t.Errorf("ReadAt of a directory: %v, want EISDIR", err)
	}
}

// TestOpenRegularRefusesWhatIsNotARegularFile: a regular file opens with
// its size and reads through the File; a FIFO opens at once (no writer
// needed) and is refused, as is a directory; a missing file is
// fs.ErrNotExist.
func TestOpenRegularRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, size, err := OpenRegular(path)
	if err != nil || size != 5 {
		t.Fatalf("OpenRegular(file) = %d, %v; want 5, nil", size, err)
	}
	buf := make([]byte, 8)
	if n, err := f.ReadAt(buf, 1); n != 4 || err != io.EOF || string(buf[:n]) != "ello" {
		t.Errorf("File.ReadAt = %d, %v, %q; want 4, io.EOF, \"ello\"", n, err, buf[:n])
	}
	if err := f.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, _, err := OpenRegular(fifo); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegular) {
			t.Errorf("OpenRegular(FIFO): %v, want ErrNotRegular", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OpenRegular(FIFO) blocked waiting for a writer")
	}
	if _, _, err := OpenRegular(dir); !errors.Is(err, ErrNotRegular) {
		t.Errorf("OpenRegular(directory): %v, want ErrNotRegular", err)
	}
	if _, _, err := OpenRegular(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("OpenRegular(missing): %v, want fs.ErrNotExist", err)
	}
}

// TestOpenReadDoesNotWaitForAWriter: a FIFO where a file was expected
// opens at once, so that the caller can see with fstat what it is.
func TestOpenReadDoesNotWaitForAWriter(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		f, err := OpenRead(fifo)
		if err == nil {
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("OpenRead(FIFO): %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OpenRead(FIFO) blocked waiting for a writer")
	}
}

// TestFDLimitIsTheSoftLimit: FDLimit is RLIMIT_NOFILE's soft limit.
func TestFDLimitIsTheSoftLimit(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if got := FDLimit(); got != uint64(lim.Cur) || got == 0 {
		t.Errorf("FDLimit() = %d, want %d", got, lim.Cur)
	}
}
