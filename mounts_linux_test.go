//go:build linux && !flashserve_portable

package flashserve

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// mountOver mounts as unix.Mount does, and unmounts lazily when the test
// ends, whatever happened (cleanups run last first: later mounts go
// first).
func mountOver(t *testing.T, source, target, fstype string, flags uintptr, data string) {
	t.Helper()
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		t.Fatalf("mount %s on %s: %v", source, target, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil && err != unix.EINVAL {
			t.Errorf("unmount %s: %v", target, err)
		}
	})
}

// servedWithin polls url until its body is want, failing after 2 s, and
// logs how long it took since changed.
func servedWithin(t *testing.T, c *http.Client, url, want string, changed time.Time, what string) {
	t.Helper()
	for {
		status, _, body := get(t, c, url)
		took := time.Since(changed)
		if status == 200 && string(body) == want {
			t.Logf("%s: served after %v", what, took.Round(10*time.Microsecond))
			return
		}
		if took > 2*time.Second {
			t.Fatalf("%s: %s is still %d %q 2 s after the change, want %q", what, url, status, body, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestMountsSeenThroughTheHandler: what a mount changes is served within
// 2 s (it was served stale for revalidate, 60 s): a release image
// bind-mounted over a served directory, its unmount, and a file
// bind-mounted into the root (docker run -v ./env.js:/srv/www/env.js)
// written in place through its source. Needs root, for mount(2); the
// statacc package runs the same changes as nobody (TestMountsSeen).
func TestMountsSeenThroughTheHandler(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mount(2) needs root")
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "www")
	for name, content := range map[string]string{
		"www/assets/app.css": "old", "www/env.js": "", "host/env.js": "a=1", "release/app.css": "release-2",
	} {
		writeFile(t, filepath.Join(dir, name), []byte(content))
	}
	mountOver(t, filepath.Join(dir, "host/env.js"), filepath.Join(root, "env.js"), "", unix.MS_BIND, "")
	port := freePort(t)
	loadSites(t, "", siteBlock(port, root, "flash_serve"))
	c := &http.Client{Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	for range 2 { // the second from the cache
		if _, _, body := get(t, c, base+"/assets/app.css"); string(body) != "old" {
			t.Fatalf("/assets/app.css: %q", body)
		}
		if _, _, body := get(t, c, base+"/env.js"); string(body) != "a=1" {
			t.Fatalf("/env.js: %q", body)
		}
	}
	mountOver(t, filepath.Join(dir, "release"), filepath.Join(root, "assets"), "", unix.MS_BIND, "")
	servedWithin(t, c, base+"/assets/app.css", "release-2", time.Now(), "a release mounted over /assets")
	if err := unix.Unmount(filepath.Join(root, "assets"), unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	servedWithin(t, c, base+"/assets/app.css", "old", time.Now(), "its lazy unmount")
	writeFile(t, filepath.Join(dir, "host/env.js"), []byte("a=22"))
	servedWithin(t, c, base+"/env.js", "a=22", time.Now(), "the bind-mounted file written in place")
}

// TestUmountSucceedsSoonAfterRequests: `umount` of a filesystem mounted
// below the root succeeds within 5 s of the last request for its files
// (it failed with EBUSY for about 61 s, while the cache held their
// descriptors; file_server holds none between requests), without a purge.
// Needs root.
func TestUmountSucceedsSoonAfterRequests(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mount(2) needs root")
	}
	root := t.TempDir()
	media := filepath.Join(root, "media")
	if err := os.Mkdir(media, 0o755); err != nil {
		t.Fatal(err)
	}
	mountOver(t, "tmpfs", media, "tmpfs", 0, "size=8m")
	for i := range 10 {
		writeFile(t, filepath.Join(media, fmt.Sprintf("f%d.bin", i)), []byte(strings.Repeat("x", 64<<10)))
	}
	port := freePort(t)
	loadSites(t, "", siteBlock(port, root, "flash_serve"))
	c := &http.Client{Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	for range 3 {
		for i := range 10 {
			if status, _, body := get(t, c, fmt.Sprintf("http://127.0.0.1:%d/media/f%d.bin", port, i)); status != 200 || len(body) != 64<<10 {
				t.Fatalf("f%d.bin: %d, %d bytes", i, status, len(body))
			}
		}
	}
	last := time.Now()
	for {
		err := unix.Unmount(media, 0)
		if err == nil {
			break
		}
		if err != unix.EBUSY {
			t.Fatal(err)
		}
		if time.Since(last) > 5*time.Second {
			t.Fatalf("umount %s still busy %v after the last request", media, time.Since(last).Round(time.Millisecond))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("umount succeeded %v after the last request", time.Since(last).Round(time.Millisecond))
}
