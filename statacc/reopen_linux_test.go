//go:build linux && !flashserve_portable

package statacc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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
	if !m.sameFile(stat()) {
		t.Fatal("the unchanged file is not the same file")
	}
	mtime := stat().ModTime()
	if err := os.Chtimes(p, mtime, mtime.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if m.sameFile(stat()) {
		t.Error("same file after its mtime changed")
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if !m.sameFile(stat()) {
		t.Fatal("not the same file once its mtime is back")
	}
	if err := os.WriteFile(p, []byte("content, longer"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if m.sameFile(stat()) {
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
	if m.sameFile(stat()) {
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
	c.Close()
	s = c.Snapshot()
	if s[OpenFiles] != 0 || s[MemoryBytes] != 0 || c.counts[fileEntries].Load() != 0 {
		t.Errorf("after Close: %d descriptors, %d memory bytes, %d file entries counted", s[OpenFiles], s[MemoryBytes], c.counts[fileEntries].Load())
	}
	if got := proctest.FDs(t); got != fds {
		t.Errorf("%d descriptors open after Close, %d before New: %v", got, fds, proctest.FDTargets())
	}
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
	go func() {
		defer wg.Done()
		for v := 1; ; v++ {
			for i, p := range paths {
				select {
				case <-stop:
					return
				default:
				}
				if i%7 != v%7 {
					continue
				}
				tmp := p + ".tmp"
				if err := os.WriteFile(tmp, []byte(versionOf(p, v, size)), 0o644); err != nil {
					t.Error(err)
					return
				}
				if err := os.Rename(tmp, p); err != nil {
					t.Error(err)
					return
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
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
	c.Close()
	if n := c.Snapshot()[OpenFiles]; n != 0 {
		t.Errorf("%d descriptors counted open after Close", n)
	}
	if got := proctest.FDs(t); got != fds {
		t.Errorf("%d descriptors open after Close, %d before New: %v", got, fds, proctest.FDTargets())
	}
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
