//go:build linux && !flashserve_portable

package statacc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// missesSince returns what looking each path up once costs the cache:
// the lookups that went to the filesystem, the negative entries and the
// watcher nodes it made; every path must be missing.
func missesSince(t *testing.T, c *Cache, paths []string) (misses, negatives, nodes int64) {
	t.Helper()
	m, n, w := c.counts[Misses].Load(), c.counts[NegativeEntries].Load(), c.counts[WatchedDirs].Load()
	lookMissing(t, c, paths)
	return c.counts[Misses].Load() - m, c.counts[NegativeEntries].Load() - n, c.counts[WatchedDirs].Load() - w
}

// listDirectory makes c list dir: it looks up listAfter missing names in
// it that it never looked up before, through the filesystem.
func listDirectory(t *testing.T, c *Cache, dir string) {
	t.Helper()
	listings := c.counts[Listings].Load()
	lookMissing(t, c, missingPaths(dir, "list-"+strconv.FormatInt(time.Now().UnixNano(), 36), c.opts.listAfter))
	if got := c.counts[Listings].Load(); got != listings+1 {
		t.Fatalf("%s: %d directories listed after %d missing names in it, want %d", dir, got, c.opts.listAfter, listings+1)
	}
}

// TestListedDirectoryAnswersDistinctMissingNames: once a directory had
// eight names looked up and found missing, every other missing name in it,
// and every path below one (380 levels deep), is answered with no lookup
// in the filesystem, no negative entry and no watcher node, the same when
// asked again and by a site confined to the same root; its files are
// still served.
func TestListedDirectoryAnswersDistinctMissingNames(t *testing.T) {
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	t.Cleanup(func() { c.Close() })
	site := t.TempDir()
	var dirs []string
	for k := range 10 {
		dir := filepath.Join(site, "dir"+strconv.Itoa(k))
		write(t, filepath.Join(dir, "index.html"), "home")
		dirs = append(dirs, dir)
	}
	listDirectory(t, c, site)
	for _, dir := range dirs {
		listDirectory(t, c, dir)
	}
	var paths []string
	for i := range 1000 {
		paths = append(paths,
			filepath.Join(dirs[i%len(dirs)], fmt.Sprintf("r%05d.html", i)),
			deepPath(site, fmt.Sprintf("nx%05d", i), 380))
	}
	for round := range 2 {
		if m, n, w := missesSince(t, c, paths); m != 0 || n != 0 || w != 0 {
			t.Errorf("round %d: %d distinct missing paths in listed directories made %d lookups in the filesystem, %d negative entries and %d nodes; want none",
				round, len(paths), m, n, w)
		}
	}
	for _, mode := range []Symlinks{SymlinksDeny, SymlinksBeneath} {
		hits := c.counts[NegativeHits].Load()
		for _, p := range paths[:100] {
			if _, err := c.getConfined(context.Background(), site, mode, p); errClass(err) != "missing" {
				t.Fatalf("%v: %s: %v", mode, p[len(site):min(len(p), len(site)+30)], err)
			}
		}
		if got := c.counts[NegativeHits].Load() - hits; got != 100 {
			t.Errorf("%v: %d of 100 missing paths answered from memory", mode, got)
		}
	}
	for _, dir := range dirs {
		if got := describe(t, c, filepath.Join(dir, "index.html")); got != "4:home" {
			t.Errorf("%s/index.html in a listed directory: %q", dir, got)
		}
	}
}

// TestListedDirectorySeesNamesMade: a name made in a listed directory
// after its listing (a file written, a file renamed in, a symlink, a
// directory made with a file below it for a path that was missing from
// its first level) is served as soon as inotify tells.
func TestListedDirectorySeesNamesMade(t *testing.T) {
	delays := newChangeDelays(t)
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	t.Cleanup(func() { c.Close() })
	root := t.TempDir()
	site := filepath.Join(root, "site")
	write(t, filepath.Join(site, "index.html"), "home")
	write(t, filepath.Join(root, "elsewhere", "moved.html"), "moved")
	listDirectory(t, c, site)
	made := []struct {
		path string
		make func()
	}{
		{filepath.Join(site, "written.html"), func() { write(t, filepath.Join(site, "written.html"), "new") }},
		{filepath.Join(site, "moved.html"), func() {
			mustRename(t, filepath.Join(root, "elsewhere", "moved.html"), filepath.Join(site, "moved.html"))
		}},
		{filepath.Join(site, "link.html"), func() {
			if err := os.Symlink("index.html", filepath.Join(site, "link.html")); err != nil {
				t.Fatal(err)
			}
		}},
		{deepPath(site, "nx", 30), func() { write(t, deepPath(site, "nx", 30), "new") }},
	}
	for _, m := range made {
		if n, _, _ := missesSince(t, c, []string{m.path}); n != 0 {
			t.Fatalf("%s: looked up in the filesystem, not answered from the listing", m.path[len(site):min(len(m.path), len(site)+20)])
		}
		want := map[bool]string{true: "5:moved", false: "3:new"}[strings.HasSuffix(m.path, "moved.html")]
		if strings.HasSuffix(m.path, "link.html") {
			want = "4:home"
		}
		changed := time.Now()
		m.make()
		took := delays.seen(t, c, changed, m.path, want)
		t.Logf("%s served %v after it was made", m.path[len(site):min(len(m.path), len(site)+20)], took)
	}
}

// TestListingReadWhileAChangeIsNotKept: a name made while its directory
// is being read may be missing from what was read; such a listing is not
// kept, so that the name is served (after its event), and the directory
// is listed again later.
func TestListingReadWhileAChangeIsNotKept(t *testing.T) {
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	t.Cleanup(func() { c.Close() })
	site := t.TempDir()
	made := filepath.Join(site, "made-while-read.html")
	testHookListingRead = func(string) {
		testHookListingRead = nil
		write(t, made, "new")
		// The event is handled before the listing would be kept.
		deadline := time.Now().Add(5 * time.Second)
		for c.watch.genOf(site) == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	t.Cleanup(func() { testHookListingRead = nil })
	lookMissing(t, c, missingPaths(site, "first", c.opts.listAfter))
	if got := c.counts[Listings].Load(); got != 0 {
		t.Errorf("a listing read while a name was made is kept (%d listings)", got)
	}
	within(t, 5*time.Second, c, made, "3:new")
	listDirectory(t, c, site)
	if got := describe(t, c, made); got != "3:new" {
		t.Errorf("listed again: %q", got)
	}
}

// TestListedAnswersAsUnlisted: a cache whose directories are listed
// answers every path as one that lists none, in every confinement, the
// listings made by lookups that follow links (a cache is shared by sites
// of every mode): a missing name, one below a file (ENOTDIR), below a
// link (a refusal under deny, and under beneath for a link that leaves
// the root), in a listed directory below such a link, below a dangling
// link, below a directory the server may read but not search (a 403 for
// anyone but root), and names the kernel refuses before it looks.
func TestListedAnswersAsUnlisted(t *testing.T) {
	root := t.TempDir()
	site := filepath.Join(root, "site")
	write(t, filepath.Join(site, "file.txt"), "f")
	write(t, filepath.Join(site, "dir", "sub", "inner.txt"), "i")
	write(t, filepath.Join(site, "noexec", "x.txt"), "x")
	write(t, filepath.Join(root, "outside", "sub", "secret"), "s")
	os.Symlink("dir", filepath.Join(site, "rel-link"))
	os.Symlink(filepath.Join(root, "outside"), filepath.Join(site, "abs-out"))
	os.Symlink("nowhere", filepath.Join(site, "dangling"))
	mustChmod(t, filepath.Join(site, "noexec"), 0o644)
	listed := New(Options{Workers: 2, Revalidate: time.Hour})
	t.Cleanup(func() { listed.Close() })
	for _, dir := range []string{"", "dir", "dir/sub", "rel-link", "rel-link/sub", "abs-out", "abs-out/sub", "noexec"} {
		for _, p := range missingPaths(filepath.Join(site, dir), "first", listed.opts.listAfter) {
			if e, err := listed.getConfined(context.Background(), site, SymlinksFollow, p); err == nil {
				e.Release()
			}
		}
	}
	t.Logf("%d directories listed", listed.counts[Listings].Load())
	paths := []string{"nope", "nope/x", "file.txt/x", "rel-link/nope", "rel-link/sub/nope", "rel-link/sub/inner.txt",
		"abs-out/nope", "abs-out/sub/nope", "abs-out/sub/secret", "dangling/x", "dir/sub/nope", "dir/sub/inner.txt",
		"noexec/nope", "noexec/x.txt",
		// What the kernel refuses before it looks is no "no such file":
		// a name over NAME_MAX, a path over PATH_MAX, a NUL byte.
		strings.Repeat("n", 300), "dir/sub/" + strings.Repeat("n", 300), "dir/" + strings.Repeat("n/", 2100) + "x", "nul\x00byte"}
	for _, mode := range []Symlinks{SymlinksFollow, SymlinksDeny, SymlinksBeneath} {
		unlisted := New(Options{Workers: 2, Revalidate: time.Hour, listAfter: -1})
		for _, rel := range paths {
			p := filepath.Join(site, rel)
			_, err := unlisted.getConfined(context.Background(), site, mode, p)
			want := errClass(err)
			for i := range 2 {
				e, err := listed.getConfined(context.Background(), site, mode, p)
				if e != nil {
					e.Release()
				}
				if got := errClass(err); got != want {
					t.Errorf("%v: %s, lookup %d: %s, want %s as without listings", mode, rel, i+1, got, want)
				}
			}
		}
		unlisted.Close()
	}
}

// TestListingIsReadAgainAfterRevalidate: a listing is trusted for
// revalidate, as a negative entry is: after that, a missing name is looked
// up in the filesystem again, and the directory listed again after more;
// a listing nobody asks for is dropped by the janitor.
func TestListingIsReadAgainAfterRevalidate(t *testing.T) {
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	t.Cleanup(func() { c.Close() })
	site := t.TempDir()
	listDirectory(t, c, site)
	c.watch.ageListings(time.Hour)
	if m, _, _ := missesSince(t, c, []string{filepath.Join(site, "after.html")}); m != 1 {
		t.Errorf("a missing name in a directory listed revalidate ago: %d lookups in the filesystem, want 1", m)
	}
	if got := c.counts[Listings].Load(); got != 0 {
		t.Errorf("%d listings kept past revalidate", got)
	}
	listDirectory(t, c, site)
	// One nobody asks for again goes with the janitor's next walk.
	c.watch.ageListings(time.Hour)
	c.dropStale()
	if got := c.counts[Listings].Load(); got != 0 {
		t.Errorf("%d listings kept by the janitor past revalidate", got)
	}
}

// TestPurgeForgetsListings: after a purge, a missing name in a listed
// directory is looked up in the filesystem again.
func TestPurgeForgetsListings(t *testing.T) {
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	t.Cleanup(func() { c.Close() })
	site := t.TempDir()
	listDirectory(t, c, site)
	c.Purge(filepath.Join(site, "x"), false)
	if m, _, _ := missesSince(t, c, []string{filepath.Join(site, "after-purge.html")}); m != 1 {
		t.Errorf("a missing name after a purge: %d lookups in the filesystem, want 1", m)
	}
}

// TestLargeDirectoryIsNotListed: a directory of more than maxDirNames
// names is not listed (its missing names cost an open each, as before),
// and not read again while its node lives.
func TestLargeDirectoryIsNotListed(t *testing.T) {
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	t.Cleanup(func() { c.Close() })
	site := t.TempDir()
	for i := range maxDirNames + 1 {
		f, err := os.Create(filepath.Join(site, strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	paths := missingPaths(site, "scan", 10*c.opts.listAfter)
	if m, _, _ := missesSince(t, c, paths); m != int64(len(paths)) {
		t.Errorf("%d of %d missing names looked up in the filesystem, want all", m, len(paths))
	}
	if got := c.counts[Listings].Load(); got != 0 {
		t.Errorf("a directory of %d names listed", maxDirNames+1)
	}
}

// genOf is the event count of dir's node, 0 if it has none.
func (w *watcher) genOf(dir string) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.root
	for rest := strings.Trim(dir, "/"); n != nil && rest != ""; {
		var name string
		name, rest, _ = strings.Cut(rest, "/")
		n = n.children[name]
	}
	if n == nil {
		return 0
	}
	return n.gen
}

// ageListings makes every listing older by d.
func (w *watcher) ageListings(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range w.byID {
		if n.listing != nil {
			n.listing.listedAt -= int64(d)
		}
	}
}

// TestFullCacheListsDirectoriesItDidNotKnow: while the negative cache is
// full, misses in directories the watcher does not know are probed (no
// node, no entry); still, their parent is listed, then the directories
// themselves (the parent's listing says they exist, so their nodes are
// made), and from then on their missing names cost no lookup in the
// filesystem. A directory listed alone, without an entry, keeps its
// listing.
func TestFullCacheListsDirectoriesItDidNotKnow(t *testing.T) {
	// Every directory is made before the cache, so that no event of their
	// making drops what the cache holds below them.
	root := t.TempDir()
	site := filepath.Join(root, "site")
	dirs := []string{site, filepath.Join(site, "a"), filepath.Join(site, "a", "b")}
	var filled []string
	for i := range 10 {
		filled = append(filled, filepath.Join(root, "filled"+strconv.Itoa(i)))
	}
	for _, dir := range append(dirs, filled...) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c := New(Options{Workers: 2, Revalidate: time.Hour, NegativeEntries: 10})
	t.Cleanup(func() { c.Close() })
	for _, dir := range filled { // one in each of ten directories: none is listed
		lookMissing(t, c, missingPaths(dir, "kept", 1))
	}
	if !c.negativesFull(lookupKey{path: filepath.Join(root, "x")}) {
		t.Fatal("the negative cache is not full")
	}
	for _, dir := range dirs {
		lookMissing(t, c, missingPaths(dir, "first", 3*c.opts.listAfter))
	}
	for _, dir := range dirs {
		paths := append(missingPaths(dir, "scan", 100), deepPath(dir, "nx", 100))
		if m, n, w := missesSince(t, c, paths); m != 0 || n != 0 || w != 0 {
			t.Errorf("%s: %d missing paths cost %d lookups in the filesystem, %d entries, %d nodes; want none", dir, len(paths), m, n, w)
		}
	}
	if got := c.counts[NegativeEntries].Load(); got != 10 {
		t.Errorf("%d negative entries, want the 10 that filled the cache", got)
	}
}

// TestDirectoriesMissedInTurnAreAllListed: 300 directories missed in
// turn, as a storm over many directories misses them, are all listed,
// though some share their slot of the lossy miss counts (a slot that
// started again for each directory in turn starved both of a pair).
func TestDirectoriesMissedInTurnAreAllListed(t *testing.T) {
	root := t.TempDir()
	var dirs []string
	for k := range 300 {
		dir := filepath.Join(root, "dir"+strconv.Itoa(k))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, dir)
	}
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	t.Cleanup(func() { c.Close() })
	for i := range 3 * c.opts.listAfter {
		for _, dir := range dirs {
			lookMissing(t, c, []string{filepath.Join(dir, fmt.Sprintf("turn%d.html", i))})
		}
	}
	if got := c.counts[Listings].Load(); got != int64(len(dirs)) {
		t.Errorf("%d of %d directories listed after %d misses each", got, len(dirs), 3*c.opts.listAfter)
	}
	var paths []string
	for _, dir := range dirs {
		paths = append(paths, filepath.Join(dir, "after.html"))
	}
	if m, _, _ := missesSince(t, c, paths); m != 0 {
		t.Errorf("%d of %d missing names then looked up in the filesystem, want none", m, len(paths))
	}
}

// TestListedDirectoryServesANameMadeJustBefore: a file written and closed
// in a listed directory is served by the next lookup, made right after
// the close, as by a client told of the file at once (an upload, then a
// redirect to it): the kernel queues the file's event before the close
// returns, but the watcher may not have read it yet, and while an event
// is unread or being handled the listing is not trusted.
func TestListedDirectoryServesANameMadeJustBefore(t *testing.T) {
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	t.Cleanup(func() { c.Close() })
	site := t.TempDir()
	write(t, filepath.Join(site, "index.html"), "home")
	listDirectory(t, c, site)
	missed := 0
	for i := range 500 {
		p := filepath.Join(site, fmt.Sprintf("made-%03d.html", i))
		write(t, p, "new")
		if got := describe(t, c, p); got != "3:new" {
			missed++
		}
	}
	if missed > 0 {
		t.Errorf("%d of 500 files made in a listed directory were not found by a lookup right after they were made", missed)
	}
	if got := describe(t, c, filepath.Join(site, "never-made.html")); got != "missing" {
		t.Errorf("a name never made: %q, want missing", got)
	}
}

// TestListedMissesDoNotWaitForEachOther: a missing name answered from a
// listing is a negative hit, and holds the watcher's lock only for
// reading: with another such answer in progress (the lock held for
// reading here), names in the listed directory and 380 levels below one
// are still answered, from memory, without waiting for it. A change of
// the tree meanwhile (an event in a watched directory above, such as
// /tmp) takes the lock for writing and makes one try wait; only a lookup
// that waits on every try fails.
func TestListedMissesDoNotWaitForEachOther(t *testing.T) {
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	t.Cleanup(func() { c.Close() })
	detachFromMountTable(c)
	site := t.TempDir()
	write(t, filepath.Join(site, "index.html"), "home")
	listDirectory(t, c, site)
	paths := []string{filepath.Join(site, "other.html"), deepPath(site, "nx", 380)}

	const tries = 5
	for try := range tries {
		c.watch.mu.RLock()
		done := make(chan int64, 1)
		go func() {
			before := c.counts[NegativeHits].Load()
			for _, p := range paths {
				if _, err := c.Get(context.Background(), p); errClass(err) != "missing" {
					t.Errorf("%.40s: %v, want missing", p, err)
				}
			}
			done <- c.counts[NegativeHits].Load() - before
		}()
		select {
		case hits := <-done:
			c.watch.mu.RUnlock()
			if hits != int64(len(paths)) {
				t.Errorf("%d of %d missing names in a listed directory answered from memory", hits, len(paths))
			}
			return
		case <-time.After(2 * time.Second):
			c.watch.mu.RUnlock()
			<-done
			t.Logf("try %d waited: a change of the tree meanwhile, or the lock taken for writing", try+1)
		}
	}
	t.Fatalf("a missing name in a listed directory waited for the watcher's lock held for reading, %d tries in a row", tries)
}

// BenchmarkListedMissParallel: missing names, each new, in 100 listed
// directories, looked up from every P at once: what a 404 storm of new
// names costs when the listings answer it.
func BenchmarkListedMissParallel(b *testing.B) {
	root := b.TempDir()
	if !localFS(root) {
		b.Skipf("%s is not on a local filesystem: its directories are not listed", root)
	}
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	defer c.Close()
	ctx := context.Background()
	for k := range 100 {
		dir := filepath.Join(root, fmt.Sprintf("dir%d", k))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for i := range c.opts.listAfter {
			c.Get(ctx, filepath.Join(dir, fmt.Sprintf("list%d", i)))
		}
	}
	if n := c.counts[Listings].Load(); n < 100 {
		b.Fatalf("%d of 100 directories listed", n)
	}
	var next atomic.Int64
	misses := c.counts[Misses].Load()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			if _, err := c.Get(ctx, fmt.Sprintf("%s/dir%d/r%09d.html", root, i%100, i)); !errors.Is(err, fs.ErrNotExist) {
				b.Error(err) // not Fatal: this is not the benchmark's goroutine
				return
			}
		}
	})
	b.StopTimer()
	if m := c.counts[Misses].Load() - misses; m != 0 {
		b.Fatalf("%d misses went to the filesystem", m)
	}
}
