//go:build linux && !flashserve_portable

package flashserve

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flashserve/caddy-flash-serve/transmit"
	"golang.org/x/sys/unix"
)

// TestTmpfsBodiesSkipTheResidencyProbe: a file on a tmpfs is always in
// memory, and tmpfs refuses the no-wait read that answers the residency
// question for a small body elsewhere, so a probe there costs an mmap, a
// mincore and a munmap per request (and, looking 64 MiB ahead, 0.6 ms of
// CPU for an 8 KiB file, 1.1k requests per second instead of 7.9k over a
// churning tree of 100,000). Its bodies go straight to sendfile, first
// request and second, without a probe or the ring, and arrive whole.
func TestTmpfsBodiesSkipTheResidencyProbe(t *testing.T) {
	root := t.TempDir()
	if os.Geteuid() == 0 {
		if err := unix.Mount("tmpfs", root, "tmpfs", 0, "size=32m"); err != nil {
			t.Fatalf("mounting a tmpfs: %v", err)
		}
		t.Cleanup(func() { unix.Unmount(root, unix.MNT_DETACH) })
	} else {
		var sf unix.Statfs_t
		if unix.Statfs("/dev/shm", &sf) != nil || sf.Type != unix.TMPFS_MAGIC {
			t.Skip("not root, and /dev/shm is not a tmpfs: no tmpfs to test on")
		}
		dir, err := os.MkdirTemp("/dev/shm", "flash-serve-test-")
		if err != nil {
			t.Skip("cannot write to /dev/shm:", err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		root = dir
	}
	files := map[string][]byte{}
	rng := rand.NewChaCha8([32]byte{7})
	for i, size := range []int{24 << 10, 20<<10 + 33, 3<<20 + 1000} {
		b := make([]byte, size)
		rng.Read(b)
		name := fmt.Sprintf("/f%d.bin", i)
		if err := os.WriteFile(filepath.Join(root, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	port := ringSite(t, root)
	c := &http.Client{Timeout: 30 * time.Second}
	for name, want := range files {
		for _, round := range []string{"first", "second"} {
			probes0 := transmit.Snapshot().ResidencyProbes
			ringReq0, sfReq0 := counters.requests[transmit.EngineIOUring].Load(), counters.requests[transmit.EngineSendfile].Load()
			if status, _, got := get(t, c, fmt.Sprintf("http://127.0.0.1:%d%s", port, name)); status != 200 || !bytes.Equal(got, want) {
				t.Fatalf("%s, %s request: status %d, %d bytes, want %d", name, round, status, len(got), len(want))
			}
			if got := counterReaches(&counters.requests[transmit.EngineSendfile], sfReq0+1) - sfReq0; got != 1 {
				t.Errorf("%s, %s request: %d requests counted as sendfile, want 1", name, round, got)
			}
			if d := counters.requests[transmit.EngineIOUring].Load() - ringReq0; d != 0 {
				t.Errorf("%s, %s request: %d requests on the ring's path, want 0", name, round, d)
			}
			if d := transmit.Snapshot().ResidencyProbes - probes0; d != 0 {
				t.Errorf("%s, %s request: %d residency probes, want 0", name, round, d)
			}
		}
	}
}
