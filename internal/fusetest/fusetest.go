//go:build linux && !386 && !arm && !mips && !mipsle

// Package fusetest is test support: it mounts a test's FUSE filesystem so
// that a read the test leaves blocked can never outlive the test binary.
// Not on 32-bit machines, where go-fuse v2.12.1 does not build.
//
// The tests serve FUSE from their own process: a thread blocked on a FUSE
// read waits uninterruptibly for the process's own server, so a binary
// that dies meanwhile hangs for good, holding the mount. Aborting the
// connection (the fuse control filesystem's abort file) fails every
// waiting read with ENOTCONN: Mount does it when an unmount is refused at
// the test's end and, as a watchdog, shortly before the binary's deadline.
package fusetest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// controlDir is where the fuse control filesystem lists connections.
const controlDir = "/sys/fs/fuse/connections"

// Mount mounts root on a new temporary directory and returns it with the
// server. The caller's own cleanup (letting blocked reads go, Unmount)
// runs first; then, if the directory is still mounted, the connection is
// aborted and the mount detached.
func Mount(t testing.TB, root fs.InodeEmbedder, opts fuse.MountOptions) (string, *fuse.Server) {
	t.Helper()
	mnt := t.TempDir()
	server, err := fs.Mount(mnt, root, &fs.Options{MountOptions: opts})
	if err != nil {
		t.Fatalf("mounting the test's FUSE filesystem: %v", err)
	}
	abort := func(why string) {
		if _, ok := connection(mnt); !ok {
			return
		}
		if err := abortConnection(mnt); err != nil {
			fmt.Fprintf(os.Stderr, "fusetest: %s: aborting the FUSE connection of %s: %v\n", why, mnt, err)
		}
		unix.Unmount(mnt, unix.MNT_DETACH)
	}
	var watchdog *time.Timer
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := d.Deadline(); ok {
			// Early enough that the abort lands before the timeout's panic.
			watchdog = time.AfterFunc(time.Until(deadline)-30*time.Second, func() { abort("the test binary's deadline is near") })
		}
	}
	// Registered first, so it runs after every cleanup the caller adds.
	t.Cleanup(func() {
		if watchdog != nil {
			watchdog.Stop()
		}
		abort("still mounted after the test's own cleanup")
	})
	return mnt, server
}

// connection returns the number of the FUSE connection mounted on dir,
// the minor of the mount's anonymous device, read from mountinfo rather
// than by a stat, which a hung connection could hold.
func connection(dir string) (string, bool) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			_, minor, _ := strings.Cut(f[2], ":")
			return minor, true
		}
	}
	return "", false
}

// abortConnection writes the abort file of the FUSE connection mounted on
// dir, mounting the control filesystem first where nothing has.
func abortConnection(dir string) error {
	conn, ok := connection(dir)
	if !ok {
		return nil
	}
	if ents, err := os.ReadDir(controlDir); err != nil || len(ents) == 0 {
		if err := unix.Mount("none", controlDir, "fusectl", 0, ""); err != nil && err != unix.EBUSY {
			return fmt.Errorf("mounting fusectl: %w", err)
		}
	}
	return os.WriteFile(filepath.Join(controlDir, conn, "abort"), []byte("1"), 0)
}
