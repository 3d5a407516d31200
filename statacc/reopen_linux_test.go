//go:build linux && !flashserve_portable

package statacc

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/flashserve/caddy-flash-serve/internal/proctest"
)

// namedFiles makes n files under root whose content names them and a
// version ("f007 v0" padded to size bytes), and returns their paths.
func namedFiles(t *testing.T, root string, n, size int) []string {
	t.Helper()
	var paths []string
	for i := range n {
		p := filepath.Join(root, fmt.Sprintf("d%d", i%3), fmt.Sprintf("f%03d", i))
		write(t, p, versionOf(p, 0, size))
		paths = append(paths, p)
	}
	return paths
}

// versionOf is the content of version v of path, size bytes long.
func versionOf(path string, v, size int) string {
	s := fmt.Sprintf("%s v%d ", filepath.Base(path), v)
	return s + strings.Repeat(".", size-len(s))
}

// closeClean closes c and checks that it gave back every descriptor (fds
// were open before New) and every count.
func closeClean(t *testing.T, c *Cache, fds int) {
	t.Helper()
	c.Close()
	s := c.Snapshot()
	if s[OpenFiles] != 0 || s[MemoryBytes] != 0 || c.counts[fileEntries].Load() != 0 || c.counts[dirEntries].Load() != 0 {
		t.Errorf("after Close: %d descriptors, %d memory bytes, %d file entries, %d dir entries counted",
			s[OpenFiles], s[MemoryBytes], c.counts[fileEntries].Load(), c.counts[dirEntries].Load())
	}
	if got := proctest.FDs(t); got != fds {
		t.Errorf("%d descriptors open after Close, %d before New: %v", got, fds, proctest.FDTargets())
	}
}

// TestEntriesOutliveTheirDescriptors: on a tree larger than MaxOpenFiles,
// an entry whose descriptor the clock closed stays, and its next request
// is a hit that opens the file again (Reopens), not a miss: 100 files
// with 10 descriptors cost 100 misses once, then none. The reopened
// descriptor is the file's, and reads its bytes.
func TestEntriesOutliveTheirDescriptors(t *testing.T) {
	paths := namedFiles(t, t.TempDir(), 100, 8<<10)
	c := New(Options{Workers: 2, MaxOpenFiles: 10, Revalidate: time.Hour, MemoryBudget: -1})
	defer c.Close()
	ctx := context.Background()
	get := func(p string) {
		t.Helper()
		e, err := c.Get(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Release()
		target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(e.FD()))
		if err != nil || target != p {
			t.Fatalf("%s: descriptor %d is %q (%v)", p, e.FD(), target, err)
		}
		b, err := e.ReadAll()
		if err != nil || string(b) != versionOf(p, 0, 8<<10) {
			t.Fatalf("%s: read %.20q, %v", p, b, err)
		}
	}
	for _, p := range paths {
		get(p)
	}
	first := c.Snapshot()
	if first[Misses] != 100 || first[OpenFiles] > 10 || c.counts[fileEntries].Load() != 100 {
		t.Fatalf("after one pass: %d misses, %d descriptors open (bound 10), %d file entries; want 100, ≤ 10, 100",
			first[Misses], first[OpenFiles], c.counts[fileEntries].Load())
	}
	for range 2 {
		for _, p := range paths {
			get(p)
		}
	}
	s := c.Snapshot()
	t.Logf("two more passes: %d misses, %d hits, %d reopens, %d descriptors closed, %d open",
		s[Misses]-first[Misses], s[Hits]-first[Hits], s[Reopens]-first[Reopens], s[Evictions], s[OpenFiles])
	if s[Misses] != first[Misses] {
		t.Errorf("%d more misses: entries whose descriptor was closed were looked up again", s[Misses]-first[Misses])
	}
	if got := s[Reopens] - first[Reopens]; got < 180 {
		t.Errorf("%d reopens in two passes over 100 files with 10 descriptors, want at least 180", got)
	}
	if s[OpenFiles] > 10 {
		t.Errorf("%d descriptors open, bound 10", s[OpenFiles])
	}
}

// sameFile is meta.sameAs of what info describes, as a reopen asks it.
func sameFile(m *meta, info fs.FileInfo) bool {
	_, id := fileIdentity(info)
	return m.sameAs(id, info.Size(), info.ModTime())
}

// TestSameFileComparesInodeSizeAndMtime: what reopen checks before it
// trusts a descriptor opened again: the file the entry was made from,
// not one of the same name whose event is not read yet.
func TestSameFileComparesInodeSizeAndMtime(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	write(t, p, "content")
	stat := func() os.FileInfo {
		t.Helper()
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	m := newEntry(p, stat()).meta
	if !sameFile(m, stat()) {
		t.Fatal("the unchanged file is not the same file")
	}
	mtime := stat().ModTime()
	if err := os.Chtimes(p, mtime, mtime.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if sameFile(m, stat()) {
		t.Error("same file after its mtime changed")
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if !sameFile(m, stat()) {
		t.Fatal("not the same file once its mtime is back")
	}
	if err := os.WriteFile(p, []byte("content, longer"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if sameFile(m, stat()) {
		t.Error("same file after its size changed")
	}
	other := filepath.Join(dir, "g")
	write(t, other, "content")
	if err := os.Chtimes(other, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, p); err != nil {
		t.Fatal(err)
	}
	if sameFile(m, stat()) {
		t.Error("same file after another one, of the same size and mtime, was renamed over it")
	}
}

// TestMaxEntriesBoundsFileEntries: past MaxEntries the least recently
// used entries go, descriptors with them; every count and descriptor is
// given back when the cache closes.
func TestMaxEntriesBoundsFileEntries(t *testing.T) {
	paths := namedFiles(t, t.TempDir(), 100, 100)
	fds := proctest.FDs(t)
	c := New(Options{Workers: 2, MaxOpenFiles: 4, MaxEntries: 20, Revalidate: time.Hour, MemoryBudget: 1 << 20})
	ctx := context.Background()
	for range 2 {
		for _, p := range paths {
			e, err := c.Get(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := e.ReadAll(); string(b) != versionOf(p, 0, 100) {
				t.Fatalf("%s: %q", p, b)
			}
			e.Release()
			if n := c.counts[fileEntries].Load(); n > 20 {
				t.Fatalf("%d file entries, MaxEntries 20", n)
			}
		}
	}
	s := c.Snapshot()
	t.Logf("%d misses, %d entry evictions, %d descriptors closed, %d memory bytes", s[Misses], s[EntryEvictions], s[Evictions], s[MemoryBytes])
	if s[EntryEvictions] == 0 || s[Misses] <= 100 {
		t.Errorf("%d entry evictions, %d misses: 100 files through 20 entries twice should evict and miss again", s[EntryEvictions], s[Misses])
	}
	if s[MemoryBytes] > 20*100 {
		t.Errorf("%d bytes in memory for at most 20 entries of 100 bytes: evicted entries kept their data counted", s[MemoryBytes])
	}
	closeClean(t, c, fds)
}

// TestReopensUnderChangesServeWholeVersions: requests that reopen, evict
// and drop entries at once, while the files are replaced by rename, each
// get one whole version of their file (bytes that were on disk together);
// no descriptor outlives the cache.
func TestReopensUnderChangesServeWholeVersions(t *testing.T) {
	const size = 4 << 10
	paths := namedFiles(t, t.TempDir(), 60, size)
	fds := proctest.FDs(t)
	c := New(Options{Workers: 2, MaxOpenFiles: 8, MaxEntries: 30, Revalidate: time.Hour, MemoryBudget: -1})
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	var writeFailed atomic.Bool
	go untilStopped(&wg, stop, func(v int) {
		for i, p := range paths {
			if i%7 != v%7 || writeFailed.Load() {
				continue
			}
			tmp := p + ".tmp"
			if err := os.WriteFile(tmp, []byte(versionOf(p, v+1, size)), 0o644); err != nil {
				writeFailed.Store(true)
				t.Error(err)
			} else if err := os.Rename(tmp, p); err != nil {
				writeFailed.Store(true)
				t.Error(err)
			}
		}
		time.Sleep(time.Millisecond)
	})
	var readers sync.WaitGroup
	for g := range 8 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for i := range 1500 {
				p := paths[(i*7+g*13)%len(paths)]
				e, err := c.Get(ctx, p)
				if err != nil {
					t.Error(err)
					return
				}
				b, err := e.ReadAll()
				e.Release()
				if err != nil || int64(len(b)) != int64(size) {
					t.Errorf("%s: %d bytes, %v", p, len(b), err)
					return
				}
				var name string
				var v int
				if _, err := fmt.Sscanf(string(b), "%s v%d ", &name, &v); err != nil || name != filepath.Base(p) || string(b) != versionOf(p, v, size) {
					t.Errorf("%s: not one whole version: %.30q", p, b)
					return
				}
			}
		}()
	}
	readers.Wait()
	close(stop)
	wg.Wait()
	s := c.Snapshot()
	t.Logf("%d hits (%d reopens), %d misses, %d invalidations, %d descriptors closed, %d entries evicted",
		s[Hits], s[Reopens], s[Misses], s[Invalidations], s[Evictions], s[EntryEvictions])
	if s[Reopens] == 0 {
		t.Error("no reopen: the test did not exercise them")
	}
	closeClean(t, c, fds)
}

// TestReopenBelowACurrentLink: a site whose root is a `current` link to a
// release reopens its files too (from the root, the link followed), and
// once the link is swapped to another release each file turns to that
// release's within inotify's latency, and never back, whether its
// descriptor was open, closed or reopened.
func TestReopenBelowACurrentLink(t *testing.T) {
	top := t.TempDir()
	var v1, v2 []string
	for i := range 30 {
		name := fmt.Sprintf("f%02d", i)
		write(t, filepath.Join(top, "releases", "v1", name), "v1 "+name)
		write(t, filepath.Join(top, "releases", "v2", name), "v2 "+name)
		v1, v2 = append(v1, "v1 "+name), append(v2, "v2 "+name)
	}
	current := filepath.Join(top, "current")
	if err := os.Symlink("releases/v1", current); err != nil {
		t.Fatal(err)
	}
	c := New(Options{Workers: 2, MaxOpenFiles: 5, Revalidate: time.Hour, MemoryBudget: -1})
	defer c.Close()
	ctx := context.Background()
	read := func(i int) string {
		t.Helper()
		e, err := c.GetCounted(ctx, nil, current, SymlinksFollow, filepath.Join(current, fmt.Sprintf("f%02d", i)))
		if err != nil {
			t.Fatal(err)
		}
		defer e.Release()
		b, err := e.ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for range 3 {
		for i := range 30 {
			if got := read(i); got != v1[i] {
				t.Fatalf("f%02d: %q, want %q", i, got, v1[i])
			}
		}
	}
	s := c.Snapshot()
	t.Logf("%d misses, %d hits, %d reopens", s[Misses], s[Hits], s[Reopens])
	if s[Misses] != 30 || s[Reopens] < 50 {
		t.Errorf("%d misses, %d reopens in three passes over 30 files with 5 descriptors below a link: want 30 and at least 50", s[Misses], s[Reopens])
	}
	tmp := filepath.Join(top, "current.new")
	if err := os.Symlink("releases/v2", tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, current); err != nil {
		t.Fatal(err)
	}
	// Each file turns to v2 within inotify's latency, and never back.
	deadline := time.Now().Add(5 * time.Second)
	swapped := make(map[int]bool)
	for len(swapped) < 30 {
		for i := range 30 {
			switch got := read(i); got {
			case v2[i]:
				swapped[i] = true
			case v1[i]:
				if swapped[i] {
					t.Fatalf("f%02d: back to %q after it gave v2", i, got)
				}
			default:
				t.Fatalf("f%02d: %q, neither release", i, got)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 30 files gave v2 within 5 s of the swap", len(swapped))
		}
	}
}

// heldByHusks is the memory_cache data that entries dropped from the
// cache still hold while the clocks keep them.
func heldByHusks(c *Cache) int {
	held, seen := 0, map[*meta]bool{}
	c.files.mu.Lock()
	for _, m := range c.files.ring {
		if m.gone.Load() && !seen[m] {
			seen[m] = true
			held += len(m.data)
		}
	}
	c.files.mu.Unlock()
	c.fds.mu.Lock()
	for _, e := range c.fds.ring {
		if m := e.meta; m.gone.Load() && !seen[m] {
			seen[m] = true
			held += len(m.data)
		}
	}
	c.fds.mu.Unlock()
	return held
}

// TestDroppedEntriesLetTheirDataGo: an entry dropped because its small
// file changed stays on the clocks until they are compacted, which would
// keep its bytes alive, uncounted by the memory budget, for as long as
// the live entries keep the clocks from compacting: past an eighth of the
// budget of such bytes, the janitor compacts them.
func TestDroppedEntriesLetTheirDataGo(t *testing.T) {
	dir := t.TempDir()
	big := namedFiles(t, filepath.Join(dir, "big"), 300, 8<<10)
	small := filepath.Join(dir, "small", "s")
	write(t, small, versionOf(small, 0, 3000))
	const budget = 1 << 20
	c := New(Options{Workers: 2, MaxOpenFiles: 16, Revalidate: time.Hour, MemoryBudget: budget, MemoryMaxFile: 4 << 10})
	defer c.Close()
	ctx := context.Background()
	get := func(p string) {
		t.Helper()
		e, err := c.Get(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		e.Release()
	}
	for _, p := range big {
		get(p)
	}
	for v := 1; v <= 200; v++ {
		get(small)
		inv := c.counts[Invalidations].Load()
		tmp := small + ".tmp"
		write(t, tmp, versionOf(small, v, 3000))
		if err := os.Rename(tmp, small); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for c.counts[Invalidations].Load() == inv {
			if time.Now().After(deadline) {
				t.Fatal("the replacement was not seen")
			}
			time.Sleep(time.Millisecond)
		}
	}
	const bound = budget/8 + 3000
	deadline := time.Now().Add(2 * time.Second)
	held := heldByHusks(c)
	for held > bound && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		held = heldByHusks(c)
	}
	t.Logf("200 versions of a 3,000-byte file: %d bytes held by dropped entries, %d counted", held, c.counts[MemoryBytes].Load())
	if held > bound {
		t.Errorf("dropped entries hold %d bytes of data the budget no longer counts, want at most %d", held, bound)
	}
}

// TestClosedLookupsGiveBackTheirMemory: a closed cache answers uncached
// (lookupClosed); the data such an answer reads is the caller's, and the
// budget does not count it.
func TestClosedLookupsGiveBackTheirMemory(t *testing.T) {
	p := filepath.Join(t.TempDir(), "small")
	write(t, p, "small body")
	c := New(Options{Workers: 1, MemoryBudget: 1 << 20})
	c.Close()
	for range 10 {
		e, err := c.Get(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := e.ReadAll(); err != nil || string(b) != "small body" {
			t.Fatalf("%q, %v", b, err)
		}
		e.Release()
	}
	if n := c.counts[MemoryBytes].Load(); n != 0 {
		t.Errorf("%d bytes counted in memory after 10 released lookups of a closed cache, want 0", n)
	}
}

// ringDead counts the entries of k that gone says left, and returns that
// with what k counts dead.
func ringDead[T comparable](k *clock[T], gone func(T) bool) (n int, dead int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, e := range k.ring {
		if gone(e) {
			n++
		}
	}
	return n, k.dead.Load()
}

// TestCountsBalanceUnderReopenEvictPurgeClose: reopens, descriptor and
// entry evictions, purges of files and subtrees and a Close in the middle
// of readers leave every count at 0, each clock's dead count equal to its
// dead entries, no descriptor open, and every request read the file it
// asked for, whole: through a descriptor of that file, or, for small
// files kept in memory (shut to a bare entry, dropped, renamed over), one
// version of it from memory.
func TestCountsBalanceUnderReopenEvictPurgeClose(t *testing.T) {
	for _, tc := range []struct {
		name    string
		size    int
		budget  int64
		renames bool // files are renamed over to new versions meanwhile
	}{
		{"descriptors", 2 << 10, -1, false},
		{"memory", 9 << 10, 1 << 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			paths := namedFiles(t, root, 60, tc.size)
			fds := proctest.FDs(t)
			c := New(Options{Workers: 2, MaxOpenFiles: 3, MaxEntries: 12, Revalidate: time.Hour, MemoryBudget: tc.budget, MemoryMaxFile: 16 << 10})
			ctx := context.Background()
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go untilStopped(&wg, stop, func(i int) {
				if i%5 == 0 {
					c.Purge(filepath.Join(root, "d"+strconv.Itoa(i%3)), true)
				} else {
					c.Purge(paths[i%len(paths)], false)
				}
				time.Sleep(200 * time.Microsecond)
			})
			if tc.renames {
				wg.Add(1)
				go untilStopped(&wg, stop, func(i int) {
					p := paths[(i*11)%len(paths)]
					if err := os.WriteFile(p+".tmp", []byte(versionOf(p, 1+i%2, tc.size)), 0o644); err == nil {
						os.Rename(p+".tmp", p)
					}
					time.Sleep(500 * time.Microsecond)
				})
			}
			var readers sync.WaitGroup
			for g := range 6 {
				readers.Add(1)
				go func() {
					defer readers.Done()
					for i := range 3000 {
						if g == 0 && i == 2000 {
							c.Close()
						}
						p := paths[(i*7+g*13)%len(paths)]
						e, err := c.Get(ctx, p)
						if err != nil {
							t.Error(err)
							return
						}
						if e.FD() >= 0 {
							// A file renamed over is the path's still, deleted.
							if target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(e.FD())); err != nil || target != p && !(tc.renames && target == p+" (deleted)") {
								t.Errorf("%s: descriptor %d is %q (%v)", p, e.FD(), target, err)
							}
						} else if e.Data() == nil {
							t.Errorf("%s: neither a descriptor nor data", p)
						}
						b, err := e.ReadAll()
						e.Release()
						prefix := filepath.Base(p) + " v"
						if err != nil || len(b) != tc.size || !strings.HasPrefix(string(b), prefix) || string(b) != versionOf(p, int(b[len(prefix)]-'0'), tc.size) {
							t.Errorf("%s: read %.20q (%d bytes), %v", p, b, len(b), err)
							return
						}
						if !tc.renames && b[len(prefix)] != '0' {
							t.Errorf("%s: version %c of a file never changed", p, b[len(prefix)])
							return
						}
					}
				}()
			}
			readers.Wait()
			close(stop)
			wg.Wait()
			closeClean(t, c, fds)
			if n, d := ringDead(&c.files, func(m *meta) bool { return m.gone.Load() }); int64(n) != d {
				t.Errorf("entries' clock: %d gone on the ring, %d counted dead", n, d)
			}
			if n, d := ringDead(&c.fds, func(e *Entry) bool { return e.shut.Load() }); int64(n) != d {
				t.Errorf("descriptors' clock: %d shut on the ring, %d counted dead", n, d)
			}
		})
	}
}

// statAs is a FileInfo whose Sys is st.
type statAs struct {
	os.FileInfo
	st *syscall.Stat_t
}

func (s statAs) Sys() any { return s.st }

// TestFileIdentityTellsDevicesOneApart: two mounts numbered one apart
// (loop0 and loop1, two tmpfs) whose files have the same inode numbers
// give other ids, so that a file of the other mount is not taken for the
// one an entry was made from (sameFile).
func TestFileIdentityTellsDevicesOneApart(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	write(t, p, "x")
	info, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, pair := range [][2]syscall.Stat_t{
		{{Dev: 46, Ino: 5}, {Dev: 47, Ino: 5}},
		{{Dev: 0x700, Ino: 12}, {Dev: 0x701, Ino: 12}},
		{{Dev: 0x801, Ino: 2}, {Dev: 0x801, Ino: 3}},
	} {
		_, a := fileIdentity(statAs{info, &pair[0]})
		_, b := fileIdentity(statAs{info, &pair[1]})
		if a == b || a == 0 || b == 0 {
			t.Errorf("dev %#x ino %d and dev %#x ino %d: ids %#x and %#x", pair[0].Dev, pair[0].Ino, pair[1].Dev, pair[1].Ino, a, b)
		}
	}
}

// TestMemoryEntriesNeedNoDescriptor: a small file kept in memory whose
// descriptor the clock closed is served from its data with no descriptor
// (FD -1): no reopen, no miss, no descriptor taken from a file that needs
// one. A file renamed over still turns to its new content within
// inotify's latency. (Races with the clocks, purges, renames and Close:
// TestCountsBalanceUnderReopenEvictPurgeClose.)
func TestMemoryEntriesNeedNoDescriptor(t *testing.T) {
	const size = 1 << 10
	paths := namedFiles(t, t.TempDir(), 60, size)
	fds := proctest.FDs(t)
	c := New(Options{Workers: 2, MaxOpenFiles: 5, Revalidate: time.Hour, MemoryBudget: 1 << 20})
	ctx := context.Background()
	// get returns the content p's entry serves and whether it had a
	// descriptor.
	get := func(p string) (string, bool) {
		t.Helper()
		e, err := c.Get(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Release()
		if e.Data() == nil {
			t.Fatalf("%s: not kept in memory", p)
		}
		return string(e.Data()), e.FD() >= 0
	}
	for _, p := range paths {
		get(p)
	}
	first := c.Snapshot()
	bare := 0
	for range 2 {
		for _, p := range paths {
			b, withFD := get(p)
			if b != versionOf(p, 0, size) {
				t.Fatalf("%s: %.20q", p, b)
			}
			if !withFD {
				bare++
			}
		}
	}
	s := c.Snapshot()
	t.Logf("two passes over 60 files with 5 descriptors: %d misses, %d reopens, %d hits without a descriptor, %d open",
		s[Misses]-first[Misses], s[Reopens]-first[Reopens], bare, s[OpenFiles])
	if s[Misses] != first[Misses] || s[Reopens] != first[Reopens] {
		t.Errorf("%d misses, %d reopens: a memory entry needs neither", s[Misses]-first[Misses], s[Reopens]-first[Reopens])
	}
	if bare < 110 || s[OpenFiles] > 5 {
		t.Errorf("%d of 120 hits without a descriptor, %d descriptors open (bound 5): want at least 110 and at most 5", bare, s[OpenFiles])
	}

	// Renamed over: each turns to version 1 and never back.
	for _, p := range paths[:10] {
		write(t, p+".tmp", versionOf(p, 1, size))
		if err := os.Rename(p+".tmp", p); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, p := range paths[:10] {
		for {
			b, _ := get(p)
			if b == versionOf(p, 1, size) {
				break
			}
			if b != versionOf(p, 0, size) || time.Now().After(deadline) {
				t.Fatalf("%s: %.20q 5 s after it was renamed over", p, b)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for _, p := range paths[:10] {
		if b, _ := get(p); b != versionOf(p, 1, size) {
			t.Fatalf("%s: back to %.20q", p, b)
		}
	}

	closeClean(t, c, fds)
}
