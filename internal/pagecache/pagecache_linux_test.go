//go:build linux && !flashserve_portable

package pagecache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testFile writes size random bytes to a new file, on disk (so that the
// page cache may drop them), and opens it, with the kernel's readahead
// off so that a read brings in what it asks for and no more.
func testFile(t *testing.T, size int) *os.File {
	t.Helper()
	p := filepath.Join(t.TempDir(), "data")
	writeSynced(t, p, size)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM); err != nil {
		t.Fatal(err)
	}
	return f
}

// onOneThread keeps the test's goroutine on its thread until the test
// ends, so that a no-wait probe's counts of blocks read in compare: a
// goroutine moved between them counts the span missing, as it should
// (TestNoWaitProbeWithADiskReadIsMissing), and a probe of a resident file
// then fails the test (TestProbeWithoutMincore once in CI).
func onOneThread(t *testing.T) {
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
}

// writeSynced writes size random bytes to path and flushes them to the
// disk, so that eviction can drop them.
func writeSynced(t *testing.T, path string, size int) {
	t.Helper()
	b := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// evict drops the file's pages and checks with mincore (this process owns
// the file, so it tells the truth) that none is left.
func evict(t *testing.T, f *os.File, size int64) {
	t.Helper()
	if err := Evict(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	if n, err := Count(int(f.Fd()), size); err != nil || n != 0 {
		t.Fatalf("%d bytes resident after DONTNEED (%v): the test would prove nothing", n, err)
	}
}

// residentBut leaves the file's size bytes all in the page cache but the
// gap bytes at hole: all evicted, the rest read again (testFile turned
// the kernel's readahead off), and checked with mincore. A page can go
// between the read and the check (CI saw one of 2,048 missing, the
// machine reclaiming memory), so the arrangement is made again, up to
// three times, before the test gives up.
func residentBut(t *testing.T, f *os.File, size, hole, gap int64) {
	t.Helper()
	var n int64
	for try := 1; try <= 3; try++ {
		evict(t, f, size)
		if _, err := f.ReadAt(make([]byte, hole), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := f.ReadAt(make([]byte, size-hole-gap), hole+gap); err != nil {
			t.Fatal(err)
		}
		if n, _ = Count(int(f.Fd()), size); n == size-gap {
			return
		}
		t.Logf("try %d: %d of %d bytes resident, want all but the %d at %d", try, n, size, gap, hole)
	}
	t.Fatalf("%d of %d bytes resident, want all but the %d at %d: the test would prove nothing", n, size, gap, hole)
}

// TestResidencyAfterEvictAndRead: after fadvise DONTNEED nothing of the
// file is resident, by every probe; after a read of its first part
// exactly that part is, and after a read of all of it all of it is.
func TestResidencyAfterEvictAndRead(t *testing.T) {
	onOneThread(t)
	const size = 1<<20 + 100
	f := testFile(t, size)
	fd := int(f.Fd())
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if !Trusted(fd, info) {
		t.Fatal("a file this process just wrote is not trusted with mincore")
	}
	evict(t, f, size)
	mincore := NewProbe(fd, true, 0)
	if n, err := mincore.Resident(0, size); n != 0 || err != nil {
		t.Errorf("evicted: Resident(0, size) = %d, %v; want 0", n, err)
	}
	if whole(&mincore, size, 256<<10) {
		t.Error("evicted: Whole with mincore = true")
	}
	if off, ok := mincore.FirstMissing(size, 256<<10); off != 0 || !ok {
		t.Errorf("evicted: FirstMissing with mincore = %d, %v; want 0, true", off, ok)
	}

	// The first 256 KiB, read with the kernel's readahead off.
	const part = 256 << 10
	if _, err := f.ReadAt(make([]byte, part), 0); err != nil {
		t.Fatal(err)
	}
	if n, err := Count(fd, size); n != part || err != nil {
		t.Errorf("after reading %d bytes: Count = %d, %v", part, n, err)
	}
	if n, _ := residentPrefix(fd, 0, size); n != part {
		t.Errorf("after reading %d bytes: residentPrefix(0, size) = %d", part, n)
	}
	if n, _ := residentPrefix(fd, 100, part); n != part-100 {
		t.Errorf("from an unaligned offset: residentPrefix(100, %d) = %d, want %d", part, n, part-100)
	}
	if n, _ := residentPrefix(fd, part, 10); n != 0 {
		t.Errorf("just past what was read: residentPrefix = %d, want 0", n)
	}
	if whole(&mincore, size, 256<<10) {
		t.Error("a quarter read: Whole with mincore = true")
	}
	if off, ok := mincore.FirstMissing(size, 256<<10); off != part || !ok {
		t.Errorf("a quarter read: FirstMissing with mincore = %d, %v; want %d, true", off, ok, part)
	}
	// No-wait probes, asked after mincore, and the one that meets the
	// missing page first: a no-wait read of a missing page brings it in.
	noWait := NewProbe(fd, false, 0)
	if n, _ := noWait.Resident(0, part+1); n != 0 {
		t.Errorf("no-wait probe one byte past the part read: %d, want 0", n)
	}
	if n, err := noWait.Resident(0, part); n != part || err != nil {
		t.Errorf("no-wait probe of the part read: %d, %v; want %d", n, err, part)
	}

	if _, err := f.ReadAt(make([]byte, size), 0); err != nil {
		t.Fatal(err)
	}
	if n, err := Count(fd, size); n != size || err != nil {
		t.Errorf("after reading it all: Count = %d, %v; want %d", n, err, size)
	}
	for _, p := range []Probe{mincore, noWait} {
		if off, ok := p.FirstMissing(size, 256<<10); off != size || !ok {
			t.Errorf("after reading it all: FirstMissing (mincore %v) = %d, %v; want %d, true", p.trusted, off, ok, size)
		}
	}
	if !whole(&mincore, size, 256<<10) || !whole(&noWait, size, 256<<10) {
		t.Errorf("after reading it all: Whole with mincore %v, without %v; want both true",
			whole(&mincore, size, 256<<10), whole(&noWait, size, 256<<10))
	}
}

// TestProbeWithoutMincore: without mincore a span is resident when both
// its ends are in the page cache, and not when either is missing; the
// end of the file is not resident; no allocation. mincore (this process owns the file, so it
// tells the truth) is asked before every no-wait read of the same pages,
// since such a read of a missing page brings it in.
func TestProbeWithoutMincore(t *testing.T) {
	onOneThread(t)
	const span = 2 << 20
	size := int64(3*span + 100)
	f := testFile(t, int(size))
	evict(t, f, size)
	fd := int(f.Fd())
	resident := func(off int64) bool {
		n, err := residentPrefix(fd, off, 1)
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	p := NewProbe(fd, false, 0)
	probe := func(off, n int64) int64 {
		got, err := p.Resident(off, n)
		if err != nil {
			t.Fatalf("Resident(%d, %d): %v", off, n, err)
		}
		return got
	}
	if n := probe(0, span); n != 0 {
		t.Errorf("cold file: Resident(0, 2 MiB) = %d, want 0", n)
	}

	// The start cached, the end not.
	if _, err := f.ReadAt(make([]byte, 64<<10), 0); err != nil {
		t.Fatal(err)
	}
	if !resident(0) || resident(span-1) {
		t.Fatalf("after reading 64 KiB: first page resident %v, page at 2 MiB-1 resident %v; want true, false", resident(0), resident(span-1))
	}
	if n := probe(0, span); n != 0 {
		t.Errorf("start cached, end missing: Resident(0, 2 MiB) = %d, want 0", n)
	}

	// All of it cached: every span resident. This VM's reclaim (DAMON
	// pageout) may evict pages read a moment ago, with no page table
	// mapping them: an attempt counts only if mincore sees the whole file
	// both before and after the probes, and a probe that says "missing"
	// then is a failure.
	warm := false
	for attempt := 0; attempt < 5 && !warm; attempt++ {
		if _, err := f.ReadAt(make([]byte, size), 0); err != nil {
			t.Fatal(err)
		}
		if n, _ := residentPrefix(fd, 0, size); n != size {
			t.Logf("after reading it all, mincore sees %d of %d bytes: read again", n, size)
			continue
		}
		p = NewProbe(fd, false, 0)
		var wrong []string
		for off := int64(0); off < size; off += span {
			n := min(span, size-off)
			if got := probe(off, n); got != n {
				wrong = append(wrong, fmt.Sprintf("Resident(%d, %d) = %d", off, n, got))
			}
		}
		if n, _ := residentPrefix(fd, 0, size); n != size {
			t.Logf("mincore saw %d of %d bytes after the probes: read again", n, size)
			continue
		}
		warm = true
		for _, w := range wrong {
			t.Errorf("warm file: %s", w)
		}
	}
	if !warm {
		t.Fatal("the file did not stay in the page cache for one probe in 5 attempts: the test proves nothing")
	}
	if n := probe(size, 10); n != 0 {
		t.Errorf("past the end: Resident = %d, want 0", n)
	}
	if n := probe(5, 1); n != 1 {
		t.Errorf("one cached byte: Resident = %d, want 1", n)
	}
	if a := testing.AllocsPerRun(100, func() { p.Resident(0, span) }); a != 0 {
		t.Errorf("a probe allocates %v times", a)
	}

	// A descriptor that cannot be read without waiting says not resident.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	pipe := NewProbe(int(r.Fd()), false, 0)
	if n, _ := pipe.Resident(0, 10); n != 0 {
		t.Errorf("a pipe: Resident = %d, want 0", n)
	}
}

// TestReadNoWait: a no-wait read takes what the page cache holds and
// fails with EAGAIN, reading nothing, where the first page is missing.
func TestReadNoWait(t *testing.T) {
	const size = 64 << 10
	f := testFile(t, size)
	fd := int(f.Fd())
	want := make([]byte, size)
	if _, err := f.ReadAt(want, 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, size+10)
	if n, err := ReadNoWait(fd, got, 0); n != size || err != nil || string(got[:n]) != string(want) {
		t.Errorf("cached file: ReadNoWait = %d, %v (content equal %v); want %d, nil", n, err, string(got[:n]) == string(want), size)
	}
	if n, err := ReadNoWait(fd, got[:0], 0); n != 0 || err != nil {
		t.Errorf("empty buffer: %d, %v", n, err)
	}
	evict(t, f, size)
	// The disk read a no-wait read starts may complete within the call on
	// this VM, which then returns the bytes: that read must then have been
	// this thread's (threadBlocksReadIn), and the bytes right.
	runtime.LockOSThread()
	before := threadBlocksReadIn()
	n, err := ReadNoWait(fd, got, 0)
	after := threadBlocksReadIn()
	runtime.UnlockOSThread()
	switch {
	case n == 0 && errors.Is(err, unix.EAGAIN):
	case n > 0 && err == nil && string(got[:n]) == string(want[:n]) && after.blocks != before.blocks:
		t.Logf("evicted file: the no-wait read's own disk read completed within the call (%d bytes)", n)
	default:
		t.Errorf("evicted file: ReadNoWait = %d, %v (blocks read in %+v, then %+v); want 0, EAGAIN, or bytes read from the disk by this thread within the call", n, err, before, after)
	}
	if a := testing.AllocsPerRun(100, func() { ReadNoWait(fd, got[:1], 0) }); a != 0 {
		t.Errorf("a no-wait read allocates %v times", a)
	}
}

// foreignFile returns a file of size bytes that this process neither owns
// nor may write, from FLASHSERVE_TEST_FOREIGN_DIR (.ci/run's nobody step):
// a run that may write that directory (root) writes the file there and
// skips, a run that may not (nobody) uses it.
func foreignFile(t *testing.T, name string, size int) string {
	t.Helper()
	base := os.Getenv("FLASHSERVE_TEST_FOREIGN_DIR")
	if base == "" {
		t.Skip("needs a file this user neither owns nor may write: FLASHSERVE_TEST_FOREIGN_DIR, written by root and read as nobody (.ci/run)")
	}
	dir := filepath.Join(base, "pagecache")
	p := filepath.Join(dir, name)
	if unix.Access(base, unix.W_OK) == nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		writeSynced(t, p, size)
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Skipf("wrote %s, for a run by a user that does not own it", p)
	}
	return p
}

// TestNonOwnerProbesWithoutMincore: for a file this process neither owns
// nor may write, Trusted is false (mincore would report pages resident
// that are not), and the no-wait probe sees the file cold after an
// eviction and warm after a read.
func TestNonOwnerProbesWithoutMincore(t *testing.T) {
	onOneThread(t)
	const size = 1 << 20
	p := foreignFile(t, "cold.bin", size)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if Trusted(fd, info) {
		t.Fatalf("%s is owned or writable by this user: the test would prove nothing", p)
	}
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_RANDOM); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	for try := 0; ; try++ {
		if err := Evict(fd); err != nil {
			t.Fatal(err)
		}
		// The last page: what the probe below reads first is the first.
		if n, _ := ReadNoWait(fd, b[:], size-1); n == 0 {
			break
		}
		if try == 20 {
			t.Fatalf("%s is still in the page cache after DONTNEED: the test would prove nothing", p)
		}
		time.Sleep(100 * time.Millisecond)
	}
	lie, err := Count(fd, size)
	t.Logf("evicted %s: mincore reports %d of %d bytes resident to this process (%v)", p, lie, size, err)
	probe := NewProbe(fd, false, 0)
	if whole(&probe, size, 256<<10) {
		t.Error("evicted: the no-wait probe says the whole file is resident")
	}
	if _, err := f.ReadAt(make([]byte, size), 0); err != nil {
		t.Fatal(err)
	}
	if !whole(&probe, size, 256<<10) {
		t.Error("read whole: the no-wait probe says it is not all resident")
	}
}

// TestProbeLooksAhead: with mincore, the first span's probe answers the
// spans that follow it (no second probe within probeFresh), up to the
// first missing page; past probeFresh the page cache is asked again and
// an eviction since is seen. The file is smaller than the look-ahead, so
// the probe maps past its end.
func TestProbeLooksAhead(t *testing.T) {
	const span, size = 1 << 20, 8<<20 + 100
	f := testFile(t, size)
	fd := int(f.Fd())
	// All of it resident but 64 KiB from 5 MiB, read with readahead off.
	const hole, gap = 5 << 20, 64 << 10
	residentBut(t, f, size, hole, gap)
	p := NewProbe(fd, true, 0)
	want := func(off, n, resident int64) {
		t.Helper()
		if got, err := p.Resident(off, n); got != resident || err != nil {
			t.Errorf("Resident(%d, %d) = %d, %v; want %d", off, n, got, err, resident)
		}
	}
	want(100, span, span)
	asked := p.vecAt
	want(span+100, span, span)
	want(4<<20, span, span)
	want(4<<20+100, span, hole-(4<<20+100))
	want(hole+4096, span, 0)
	want(hole+gap, size-(hole+gap), size-(hole+gap))
	if took := time.Since(asked); p.vecAt != asked && took < probeFresh {
		t.Errorf("the spans after the first were probed again within %v (%v after the first)", probeFresh, took)
	}
	// All of it evicted now: the answer stands until it is older than
	// probeFresh, then the new state is seen.
	evict(t, f, size)
	want(0, span, span)
	p.vecAt = p.vecAt.Add(-2 * probeFresh)
	want(0, span, 0)
	if p.vecAt == asked {
		t.Error("an answer older than probeFresh was not asked again")
	}
	want(hole+gap, 1000, 0)
}

// TestProbeLooksNoFurtherThanTheFile: a probe that knows the file's size
// asks mincore about the file's pages only, not the 64 MiB it looks ahead
// in a large file (each page of the mapping is looked up, past the end
// too: on tmpfs that cost 0.6 ms for an 8 KiB file), answers the same as
// one that does not know it, and allocates nothing for a small file.
func TestProbeLooksNoFurtherThanTheFile(t *testing.T) {
	const size = 8 << 10
	f := testFile(t, size)
	fd := int(f.Fd())
	if _, err := f.ReadAt(make([]byte, size), 0); err != nil {
		t.Fatal(err)
	}
	sized, unsized := NewProbe(fd, true, size), NewProbe(fd, true, 0)
	for _, p := range []*Probe{&sized, &unsized} {
		if n, err := p.Resident(0, size); n != size || err != nil {
			t.Fatalf("Resident(0, %d) = %d, %v; want all of it", size, n, err)
		}
	}
	if pages := int64(len(sized.answer())) * pageSize; pages > size+pageSize {
		t.Errorf("a probe of an %d-byte file asked mincore about %d bytes", size, pages)
	}
	if pages := int64(len(unsized.answer())) * pageSize; pages < probeAhead {
		t.Errorf("a probe that does not know the size looked %d bytes ahead, want %d (the test proves nothing)", pages, probeAhead)
	}
	if n, err := sized.Resident(4096, 10); n != 10 || err != nil {
		t.Errorf("Resident(4096, 10) = %d, %v; want 10", n, err)
	}
	allocs := testing.AllocsPerRun(20, func() {
		p := NewProbe(fd, true, size)
		p.Resident(100, size-100)
	})
	if allocs != 0 {
		t.Errorf("a probe of a small file allocated %v times, want 0", allocs)
	}
}

// TestBlocksReadInCountsThisThreadsDiskReads: the count the no-wait probe
// relies on moves when this thread reads a page from the disk (the
// readahead a no-wait read starts included) and not when it reads one
// from the page cache.
func TestBlocksReadInCountsThisThreadsDiskReads(t *testing.T) {
	const size = 1 << 20
	f := testFile(t, size)
	fd := int(f.Fd())
	evict(t, f, size)
	// The counts are one thread's.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var b [1]byte
	before := threadBlocksReadIn()
	// The read may see the disk read it started complete within the call
	// and return the byte (a virtual disk over the host's cache, about 1
	// run in 100 here): it was this thread's disk read all the same.
	if _, err := ReadNoWait(fd, b[:], 0); err != nil && !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("no-wait read of an evicted page: %v, want EAGAIN or the byte", err)
	}
	if after := threadBlocksReadIn(); after.blocks == before.blocks || after.tid != before.tid {
		t.Errorf("a no-wait read of an evicted page started no disk read by this thread's count (%+v, then %+v)", before, after)
	}
	before = threadBlocksReadIn()
	if _, err := f.ReadAt(b[:], size/2); err != nil {
		t.Fatal(err)
	}
	if after := threadBlocksReadIn(); after.blocks == before.blocks {
		t.Errorf("a blocking read of an evicted page is not counted (%+v, then %+v)", before, after)
	}
	before = threadBlocksReadIn()
	if n, err := ReadNoWait(fd, b[:], size/2); n != 1 || err != nil {
		t.Fatalf("no-wait read of the page just read: %d, %v", n, err)
	}
	if after := threadBlocksReadIn(); after != before {
		t.Errorf("a read from the page cache counted blocks read in: %+v, then %+v", before, after)
	}
}

// TestNoWaitProbeWithADiskReadIsMissing: a no-wait probe during which
// this thread submitted a disk read reports the span missing, though its
// reads returned bytes: the page was read in during the call, and the
// rest of the span may still be on disk. The file here is resident; the
// count is made to move as a read that met the disk moves it.
func TestNoWaitProbeWithADiskReadIsMissing(t *testing.T) {
	const size = 1 << 20
	f := testFile(t, size)
	if _, err := f.ReadAt(make([]byte, size), 0); err != nil {
		t.Fatal(err)
	}
	// On one thread, so that the real counts compare: a goroutine moved
	// between them counts the span missing, as it should (below), and
	// that happened here once in 16 runs under -race.
	runtime.LockOSThread()
	p := NewProbe(int(f.Fd()), false, size)
	n, _ := p.Resident(0, size)
	runtime.UnlockOSThread()
	if n != size {
		t.Fatalf("a resident file probed without mincore: %d of %d bytes", n, size)
	}
	var reads int64
	blocksReadIn = func() threadReads { reads++; return threadReads{tid: 1, blocks: reads} }
	defer func() { blocksReadIn = threadBlocksReadIn }()
	p = NewProbe(int(f.Fd()), false, size)
	if n, _ := p.Resident(0, size); n != 0 {
		t.Errorf("a probe that met the disk: %d bytes resident, want 0", n)
	}
	if off, ok := p.FirstMissing(size, 256<<10); off != 0 || !ok {
		t.Errorf("a whole-file probe that met the disk: FirstMissing = %d, %v; want 0, true", off, ok)
	}
	// The goroutine on another thread after the reads: the counts do not
	// compare, and the span counts missing too.
	blocksReadIn = func() threadReads { reads++; return threadReads{tid: int(reads), blocks: 7} }
	p = NewProbe(int(f.Fd()), false, size)
	if n, _ := p.Resident(0, size); n != 0 {
		t.Errorf("a probe whose goroutine changed threads: %d bytes resident, want 0", n)
	}
	blocksReadIn = func() threadReads { return threadReads{tid: 1, blocks: 7} }
	p = NewProbe(int(f.Fd()), false, size)
	if n, _ := p.Resident(0, size); n != size {
		t.Errorf("a probe that met no disk, on one thread: %d bytes resident, want %d", n, size)
	}
}

// TestNoWaitSpanBeforeAnEvictedOneIsResident: a span whose two ends are
// cached is resident by the no-wait probe, though the byte just past its
// end (which the end's read takes too, to know the next span's start) is
// not: the disk read that byte starts is the next span's, not this one's.
// Here the first 2 MiB of a 4 MiB file are cached and the rest evicted;
// the whole-file probe must say the data stops at 2 MiB, not at 0. An
// attempt after which mincore no longer sees the first 2 MiB (another
// process dropped the caches meanwhile) proves nothing and is made again.
func TestNoWaitSpanBeforeAnEvictedOneIsResident(t *testing.T) {
	onOneThread(t)
	const span = 2 << 20
	const size = 2 * span
	f := testFile(t, size)
	fd := int(f.Fd())
	// setUp leaves the first span cached and the second evicted, waiting
	// for a read a probe started there (a page under I/O is not dropped).
	setUp := func() {
		if _, err := f.ReadAt(make([]byte, size), 0); err != nil {
			t.Fatal(err)
		}
		if err := unix.Fadvise(fd, span, span, unix.FADV_DONTNEED); err != nil {
			t.Fatal(err)
		}
		if _, err := f.ReadAt(make([]byte, span), 0); err != nil {
			t.Fatal(err)
		}
	}
	firstSpanStayed := func() bool {
		n, err := residentPrefix(fd, 0, span)
		return n == span && err == nil
	}
	for try := 1; ; try++ {
		setUp()
		if n, err := residentPrefix(fd, 0, size); n != span || err != nil {
			t.Fatalf("set up: mincore sees %d bytes resident (%v), want %d: the test would prove nothing", n, err, span)
		}
		p := NewProbe(fd, false, size)
		got, _ := p.Resident(0, span)
		stayed := firstSpanStayed()
		setUp()
		p = NewProbe(fd, false, size)
		off, ok := p.FirstMissing(size, span)
		if !(stayed && firstSpanStayed()) && try < 3 {
			t.Logf("attempt %d: the first span was evicted under the probes; again", try)
			continue
		}
		if got != span {
			t.Errorf("cached span before an evicted one: Resident(0, 2 MiB) = %d, want %d", got, span)
		}
		if off != span || !ok {
			t.Errorf("first 2 MiB cached, the rest evicted: FirstMissing = %d, %v; want %d, true", off, ok, span)
		}
		return
	}
}

// TestReadNoWaitMetDiskTellsTheDisk: a no-wait read that returns the bytes
// says whether it met the disk (the disk read it started completed within
// the call, as this VM's virtio disk does), by this thread's count of
// blocks read in; a read from the page cache never says so.
func TestReadNoWaitMetDiskTellsTheDisk(t *testing.T) {
	const size = 64 << 10
	f := testFile(t, size)
	fd := int(f.Fd())
	want := make([]byte, size)
	if _, err := f.ReadAt(want, 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, size)
	for i := range 20 {
		if n, met, err := ReadNoWaitMetDisk(fd, got, 0); n != size || met || err != nil || string(got) != string(want) {
			t.Fatalf("cached file, read %d: %d, met disk %v, %v (content equal %v); want %d, false, nil", i, n, met, err, string(got[:n]) == string(want[:n]), size)
		}
	}
	if n, met, err := ReadNoWaitMetDisk(fd, got[:0], 0); n != 0 || met || err != nil {
		t.Errorf("empty buffer: %d, %v, %v", n, met, err)
	}
	if a := testing.AllocsPerRun(100, func() { ReadNoWaitMetDisk(fd, got[:1], 0) }); a != 0 {
		t.Errorf("a no-wait read that tells the disk allocates %v times", a)
	}
	evict(t, f, size)
	switch n, met, err := ReadNoWaitMetDisk(fd, got, 0); {
	case n == 0 && errors.Is(err, unix.EAGAIN):
	case n > 0 && err == nil && met && string(got[:n]) == string(want[:n]):
		t.Logf("evicted file: the no-wait read's own disk read completed within the call (%d bytes), and it says so", n)
	default:
		t.Errorf("evicted file: %d, met disk %v, %v; want 0 and EAGAIN, or the bytes and met disk", n, met, err)
	}

	// What the count says decides, for a read slower than readNoDisk: a
	// count that moves is a read that met the disk, one the kernel does not
	// answer is not.
	if _, err := f.ReadAt(want, 0); err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration, f func() (int64, bool)) { readNoDisk, blocksReadInFunc = d, f }(readNoDisk, blocksReadInFunc)
	readNoDisk = 0
	for _, c := range []struct {
		name     string
		count    func() (int64, bool)
		wantDisk bool
	}{
		{"moving count", func() func() (int64, bool) { var k int64; return func() (int64, bool) { k++; return k, true } }(), true},
		{"still count", func() (int64, bool) { return 7, true }, false},
		{"no count", func() (int64, bool) { return 0, false }, false},
	} {
		blocksReadInFunc = c.count
		if n, met, err := ReadNoWaitMetDisk(fd, got, 0); n != size || met != c.wantDisk || err != nil {
			t.Errorf("%s: %d, met disk %v, %v; want %d, %v, nil", c.name, n, met, err, size, c.wantDisk)
		}
	}
}

// TestResidentFileCostsOneCachestat: a file all in the page cache is
// found so with one cachestat(2) and no mincore (whose mmap, per-page
// lookups and munmap took 15-45 ms for 1 GiB here), by FirstMissing,
// Count and a probe's look ahead; with a page evicted, mincore still says
// exactly where the data stops.
func TestResidentFileCostsOneCachestat(t *testing.T) {
	const size = 4<<20 + 100
	f := testFile(t, size)
	fd := int(f.Fd())
	if _, err := f.ReadAt(make([]byte, size), 0); err != nil {
		t.Fatal(err)
	}
	if allCached(fd, 0, size); noCachestat.Load() {
		t.Skip("this kernel has no cachestat(2) (Linux 6.5): every probe is a mincore")
	}
	asks := func(what string, mincores, cachestats int64, ask func()) {
		t.Helper()
		m0, c0 := Asked()
		ask()
		m1, c1 := Asked()
		if m1-m0 != mincores || c1-c0 != cachestats {
			t.Errorf("%s: %d mincore and %d cachestat calls, want %d and %d", what, m1-m0, c1-c0, mincores, cachestats)
		}
	}
	p := NewProbe(fd, true, size)
	asks("resident: FirstMissing", 0, 1, func() {
		if off, ok := p.FirstMissing(size, 2<<20); off != size || !ok {
			t.Errorf("resident: FirstMissing = %d, %v; want %d, true", off, ok, size)
		}
	})
	asks("resident: Count", 0, 1, func() {
		if n, err := Count(fd, size); n != size || err != nil {
			t.Errorf("resident: Count = %d, %v; want %d", n, err, size)
		}
	})
	asks("resident: Resident span after span", 0, 1, func() {
		for off := int64(0); off < size; off += 1 << 20 {
			if n, err := p.Resident(off, min(1<<20, size-off)); n != min(1<<20, size-off) || err != nil {
				t.Errorf("resident: Resident(%d) = %d, %v", off, n, err)
			}
		}
	})

	// 64 KiB evicted, 3 MiB in (all evicted, the rest read again with the
	// kernel's readahead off): cachestat sees it, mincore says where.
	const hole, gap = 3 << 20, 64 << 10
	residentBut(t, f, size, hole, gap)
	p = NewProbe(fd, true, size)
	asks("a gap: FirstMissing", 1, 1, func() {
		if off, ok := p.FirstMissing(size, 2<<20); off != hole || !ok {
			t.Errorf("a gap: FirstMissing = %d, %v; want %d, true", off, ok, hole)
		}
	})
	asks("a gap: Resident up to it", 1, 1, func() {
		if n, err := p.Resident(2<<20, 2<<20); n != hole-2<<20 || err != nil {
			t.Errorf("a gap: Resident(2 MiB, 2 MiB) = %d, %v; want %d", n, err, hole-2<<20)
		}
	})
	asks("a gap: Resident after it, a new probe", 0, 1, func() {
		q := NewProbe(fd, true, size)
		if n, err := q.Resident(hole+gap, size-hole-gap); n != size-hole-gap || err != nil {
			t.Errorf("a gap: Resident after it = %d, %v; want %d", n, err, size-hole-gap)
		}
	})
}

// whole reports whether the first size bytes of the file are all in the
// page cache, by FirstMissing.
func whole(p *Probe, size, span int64) bool {
	off, ok := p.FirstMissing(size, span)
	return ok && off == size
}
