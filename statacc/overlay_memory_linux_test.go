//go:build linux && !flashserve_portable

package statacc

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
	"golang.org/x/sys/unix"
)

// TestSmallFileOnOverlayKeptInMemory: a small file on overlayfs (a
// container's image) whose bytes are in the page cache is kept in memory
// at its miss, as one on ext4 is.
func TestSmallFileOnOverlayKeptInMemory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting overlayfs needs root")
	}
	base := t.TempDir()
	lower, upper, work, mnt := filepath.Join(base, "lower"), filepath.Join(base, "upper"), filepath.Join(base, "work"), filepath.Join(base, "mnt")
	for _, d := range []string{lower, upper, work, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	content := strings.Repeat("x", 8<<10)
	if err := os.WriteFile(filepath.Join(lower, "site.css"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("overlay", mnt, "overlay", 0, "lowerdir="+lower+",upperdir="+upper+",workdir="+work); err != nil {
		t.Skipf("overlayfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	p := filepath.Join(mnt, "site.css")
	// Read it whole through the overlay: every page is cached now.
	for range 2 {
		if b, err := os.ReadFile(p); err != nil || string(b) != content {
			t.Fatal(err)
		}
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, _ := f.Stat()
	fd := int(f.Fd())
	cached, known := pagecache.WholeCached(fd, int64(len(content)), pagecache.Trusted(fd, info))
	n, _ := pagecache.Count(fd, int64(len(content)))
	buf := make([]byte, len(content))
	rn, rerr := pagecache.ReadNoWait(fd, buf, 0)
	t.Logf("overlay fd: WholeCached=%v known=%v, mincore count %d of %d, no-wait read %d %v", cached, known, n, len(content), rn, rerr)

	c := New(Options{Workers: 1, Revalidate: time.Hour, MemoryBudget: 1 << 20})
	defer c.Close()
	e, err := c.Get(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Release()
	if string(e.Data()) != content {
		t.Errorf("a small file on overlayfs, whole in the page cache, is not kept in memory (%d bytes kept)", len(e.Data()))
	}
}
