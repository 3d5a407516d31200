//go:build unix

package hotset

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestLoadRefusesWhatIsNotARegularFile: a FIFO, a directory or a file
// over maxSetBytes in the hot set's place is an error, and the FIFO one
// comes at once (no writer is waited for).
func TestLoadRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.json")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(maxSetBytes + 1); err != nil { // sparse: no data written
		t.Fatal(err)
	}
	f.Close()
	for _, path := range []string{fifo, dir, big} {
		done := make(chan error, 1)
		go func() { _, err := Load(path); done <- err }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("Load(%s) gave no error", filepath.Base(path))
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Load(%s) still waiting after 5 s", filepath.Base(path))
		}
	}
}
