//go:build linux && !flashserve_portable

package statacc

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMountTableDiff: a read of the mount table gives the mount points of
// the lines that appeared or went since the last read, unescaped, each
// once; a line is a mount by its ID, parent, device, root and mount
// point, so that options changing (a remount) are no change, and a mount
// replaced by another with the same ID (the kernel reuses them at once)
// at the same place is one.
func TestMountTableDiff(t *testing.T) {
	m := &mountWatcher{seen: make(map[string]*uint64)}
	read := func(lines ...string) []string {
		m.table = []byte(strings.Join(lines, "\n") + "\n")
		got := m.diff()
		slices.Sort(got)
		return got
	}
	rootfs := "1 0 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw"
	proc := "21 1 0:20 / /proc rw,nosuid - proc proc rw"
	assets := `40 1 0:39 / /srv/my\040site/assets rw - tmpfs tmpfs rw`
	odd := `41 1 8:1 /data /srv/a\011b\134c\012d rw - ext4 /dev/sda1 rw`
	for _, step := range []struct {
		what  string
		lines []string
		want  []string
	}{
		{"the first read", []string{rootfs, proc}, nil},
		{"the same table", []string{rootfs, proc}, nil},
		{"a mount with a space", []string{rootfs, proc, assets}, []string{"/srv/my site/assets"}},
		{"a tab, a backslash and a newline", []string{rootfs, proc, assets, odd}, []string{"/srv/a\tb\\c\nd"}},
		{"a remount (options only)", []string{strings.Replace(rootfs, "rw,relatime", "ro,relatime", 1), proc, assets, odd}, nil},
		{"an unmount", []string{rootfs, proc, odd}, []string{"/srv/my site/assets"}},
		{"the same ID mounted elsewhere", []string{rootfs, proc, `41 1 8:1 /data /mnt rw - ext4 /dev/sda1 rw`}, []string{"/mnt", "/srv/a\tb\\c\nd"}},
		{"the same ID and place, another root", []string{rootfs, proc, `41 1 8:1 /other /mnt rw - ext4 /dev/sda1 rw`}, []string{"/mnt"}},
		{"a mount over /", []string{rootfs, proc, `41 1 8:1 /other /mnt rw - ext4 /dev/sda1 rw`, "50 1 0:50 / / rw - tmpfs none rw"}, []string{"/"}},
		{"lines cut short are skipped", []string{rootfs, proc, `41 1 8:1 /other /mnt rw - ext4 /dev/sda1 rw`, "50 1 0:50 / / rw - tmpfs none rw", "60 1", ""}, nil},
	} {
		if got := read(step.lines...); !slices.Equal(got, step.want) {
			t.Errorf("%s: %q, want %q", step.what, got, step.want)
		}
	}
}

// BenchmarkMountTableRead is what one change of the mount table costs the
// process (whatever the number of caches): a read of the table and its
// diff with the last one. Its size is this process's mount table's: run
// it in a mount namespace with thousands of mounts for a container host's
// figure (docs/architecture.md has the command).
func BenchmarkMountTableRead(b *testing.B) {
	fd, err := unix.Open(mountinfoPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Skip(err)
	}
	defer unix.Close(fd)
	m := &mountWatcher{fd: fd, buf: make([]byte, 16<<10), seen: make(map[string]*uint64)}
	if err := m.read(); err != nil {
		b.Fatal(err)
	}
	m.diff()
	lines := bytes.Count(m.table, []byte("\n"))
	b.ReportAllocs()
	for b.Loop() {
		if err := m.read(); err != nil {
			b.Fatal(err)
		}
		m.diff()
	}
	b.ReportMetric(float64(lines), "mounts")
}

// TestLookupsWhileMountTableUnreadAreTrustedBriefly: between the kernel's
// word that the mount table changed and the read of the table, what a
// lookup finds may come from a mount that is gone again by the read, which
// then shows no change: such an entry (positive or negative) is trusted
// for a second, not until an event; a directory entered meanwhile is entered again once the table is read. After the
// read, lookups are trusted until an event again.
func TestLookupsWhileMountTableUnreadAreTrustedBriefly(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a/x.txt"), strings.Repeat("x", 4096))
	write(t, filepath.Join(dir, "b/y.txt"), strings.Repeat("y", 4096))
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	defer c.Close()
	detachFromMountTable(c)
	x, y, missing := filepath.Join(dir, "a/x.txt"), filepath.Join(dir, "b/y.txt"), filepath.Join(dir, "a/none.txt")
	describe(t, c, x) // a's directory is watched already
	c.Purge(x, false)
	c.watch.mountsChanging()
	for _, p := range []string{x, y, missing} {
		describe(t, c, p)
		if e := c.entries.Load(p); e != nil {
			if e.watched {
				t.Errorf("%s, looked up while the table is unread: trusted until an event", p)
			}
		} else if sl := c.negativeSlot(p); sl == nil || sl.watched() {
			t.Errorf("%s, looked up while the table is unread: negative entry %v, trusted until an event", p, sl != nil)
		}
	}
	nodes := c.counts[WatchedDirs].Load()
	c.watch.mountsChanged(nil) // the table read: no change
	for _, p := range []string{x, y, missing} {
		c.Purge(p, false)
		describe(t, c, p)
		if !c.cachedWatched(p) {
			t.Errorf("%s, looked up once the table was read: not trusted until an event", p)
		}
	}
	if n := c.counts[WatchedDirs].Load(); n <= nodes {
		t.Errorf("b's directory was not entered once the table was read: %d nodes, %d before", n, nodes)
	}
}

// TestListingReadWhileMountTableChangesIsNotKept: a directory's listing
// read while a change of the mount table is unread, or while one is read,
// may be the listing of a mount that came and went (or of what such a
// mount covered), which no read of the table shows: it is not kept, and
// the directory is listed by later misses once the table is read.
func TestListingReadWhileMountTableChangesIsNotKept(t *testing.T) {
	site := t.TempDir()
	write(t, filepath.Join(site, "index.html"), "home")
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	t.Cleanup(func() { c.Close() })
	detachFromMountTable(c)
	describe(t, c, filepath.Join(site, "index.html")) // its directory is watched
	c.watch.mountsChanging()
	lookMissing(t, c, missingPaths(site, "unread", 2*c.opts.listAfter))
	if got := c.counts[Listings].Load(); got != 0 {
		t.Errorf("a listing read while the mount table is unread is kept (%d listings)", got)
	}
	c.watch.mountsChanged(nil) // the table read: no change
	testHookListingRead = func(string) {
		testHookListingRead = nil
		// A mount came and went while the directory was read.
		c.watch.mountsChanging()
		c.watch.mountsChanged(nil)
	}
	t.Cleanup(func() { testHookListingRead = nil })
	lookMissing(t, c, missingPaths(site, "during", c.opts.listAfter))
	if got := c.counts[Listings].Load(); got != 0 {
		t.Errorf("a listing read while the mount table changed is kept (%d listings)", got)
	}
	listDirectory(t, c, site)
}

// detachFromMountTable stops telling c of the mount table's changes, so
// that a test tells it of them (mountsChanging, mountsChanged) alone: the
// process's watcher tells every cache of each read of the table, its
// first one after it starts included, which would end an "unread" state
// the test set.
func detachFromMountTable(c *Cache) { unwatchMounts(c) }

// TestDirectoryInstalledWhileMountTableChangesIsInstalledAgain: a lookup
// makes its directories' nodes one level at a time; a mount that comes
// and goes while any one level is installed (the table read afterwards
// shows no change) may have put that level's watch on the mount's
// directory, so that level is installed again, and the entry found is
// then trusted until an event.
func TestDirectoryInstalledWhileMountTableChangesIsInstalledAgain(t *testing.T) {
	dir := t.TempDir()
	x := filepath.Join(dir, "a/b/c/x.txt")
	write(t, x, "x")
	t.Cleanup(func() { testHookWatchAdded = nil })
	for _, level := range []string{"a", "a/b", "a/b/c"} {
		c := New(Options{Workers: 2, Revalidate: time.Hour})
		detachFromMountTable(c)
		at := filepath.Join(dir, level)
		installs := 0
		testHookWatchAdded = func(path string) {
			if path != at {
				return
			}
			if installs++; installs == 1 {
				c.watch.mountsChanging()
				c.watch.mountsChanged(nil)
			}
		}
		if got := describe(t, c, x); got != "1:x" {
			t.Errorf("%s: %q", level, got)
		}
		testHookWatchAdded = nil
		if installs < 2 {
			t.Errorf("%s, installed while a mount came and went: installed %d times, want it made again", level, installs)
		}
		if !c.cachedWatched(x) {
			t.Errorf("%s: the entry found once the level was installed again is not trusted until an event", level)
		}
		c.Close()
	}
}

// TestMountWatcherStartIsNoChange: a watcher of the mount table that
// starts (with the process's first cache) does not take the readiness
// epoll reports for a file it registers for a change of the table: with
// no mount made, lookups then installing directories are not told to
// start again, which made them give up their watches (a link's node not
// installed, a change seen after a second instead of at once) in about
// one start in three.
func TestMountWatcherStartIsNoChange(t *testing.T) {
	table := func() string {
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// A round during which the host's table changed (another process's
	// mount: a test suite running beside this one) proves nothing.
	for round, tries := 0, 0; round < 30; tries++ {
		if tries == 300 {
			t.Fatalf("the host's mount table changed during %d of %d starts", tries-round, tries)
		}
		before := table()
		c := New(Options{Workers: 1, Revalidate: time.Hour})
		time.Sleep(20 * time.Millisecond)
		c.watch.mu.Lock()
		gen, unread := c.watch.mountGen, c.watch.mountsUnread.Load()
		c.watch.mu.Unlock()
		c.Close()
		if table() != before {
			continue
		}
		if gen != 0 || unread {
			t.Fatalf("start %d: the mount table's generation is %d (unread %v) with no mount made, want 0", round, gen, unread)
		}
		round++
	}
}
