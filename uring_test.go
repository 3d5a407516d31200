//go:build linux && !flashserve_portable

package flashserve

import (
	"github.com/flashserve/caddy-flash-serve/internal/proctest"

	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flashserve/caddy-flash-serve/internal/ringtest"
	"github.com/flashserve/caddy-flash-serve/prewarm"
	"github.com/flashserve/caddy-flash-serve/transmit"
)

// coldTree writes n files of size bytes (in a directory of another
// user's files with FLASHSERVE_TEST_FOREIGN_DIR: see testDir) and evicts
// them from the page cache.
func coldTree(t *testing.T, n, size int) (string, map[string][]byte) {
	t.Helper()
	files := map[string][]byte{}
	// Whole reads of one stream, not a call per byte: 400 files under the
	// race detector are generated in well under a second.
	rng := rand.NewChaCha8([32]byte{byte(n), byte(n >> 8), byte(size), byte(size >> 8), byte(size >> 16), byte(size >> 24)})
	for i := range n {
		b := make([]byte, size)
		rng.Read(b)
		files[fmt.Sprintf("/c%04d.bin", i)] = b
	}
	return evictedTree(t, fmt.Sprintf("cold-%d-%d", n, size), files), files
}

// sharedRing reports whether the shared ring exists, and why not.
func sharedRing(t *testing.T) (ok bool, err error) {
	t.Helper()
	ok, err = ringtest.Shared()
	if !ok && err == nil {
		t.Fatal("no shared ring")
	}
	return ok, err
}

// ringSite serves root with transmit auto and checks that the shared
// ring exists.
func ringSite(t *testing.T, root string) int {
	t.Helper()
	port := freePort(t)
	loadSites(t, "", siteBlock(port, root, "flash_serve"))
	if ok, err := sharedRing(t); !ok {
		t.Fatalf("io_uring should work on this kernel: %v", err)
	}
	return port
}

func TestColdBodiesGoThroughTheRing(t *testing.T) {
	root, files := coldTree(t, 4, 3<<20+1000)
	port := ringSite(t, root)
	c := &http.Client{Timeout: 30 * time.Second}
	for name, want := range files {
		ring0, sf0, copy0 := counters.bytes[transmit.EngineIOUring].Load(), counters.bytes[transmit.EngineSendfile].Load(), counters.bytes[transmit.EngineCopy].Load()
		st0 := transmit.Snapshot()
		if status, _, got := get(t, c, fmt.Sprintf("http://127.0.0.1:%d%s", port, name)); status != 200 || !bytes.Equal(got, want) {
			t.Fatalf("%s cold: status %d, %d bytes", name, status, len(got))
		}
		if counterReaches(&counters.bytes[transmit.EngineIOUring], ring0+1) == ring0 {
			st := transmit.Snapshot()
			t.Errorf("%s cold: no byte was read through io_uring (%d by sendfile, %d copied; %d residency probes, %d cold bodies)", name,
				counters.bytes[transmit.EngineSendfile].Load()-sf0, counters.bytes[transmit.EngineCopy].Load()-copy0,
				st.ResidencyProbes-st0.ResidencyProbes, st.ColdBodies-st0.ColdBodies)
		}
		// Now resident: sendfile carries it all, and nothing goes through
		// the ring.
		ring1, sf1 := counters.bytes[transmit.EngineIOUring].Load(), counters.bytes[transmit.EngineSendfile].Load()
		if status, _, got := get(t, c, fmt.Sprintf("http://127.0.0.1:%d%s", port, name)); status != 200 || !bytes.Equal(got, want) {
			t.Fatalf("%s warm: status %d", name, status)
		}
		if d := counters.bytes[transmit.EngineIOUring].Load() - ring1; d != 0 {
			t.Errorf("%s warm: %d bytes through io_uring, want 0", name, d)
		}
		if d := counterReaches(&counters.bytes[transmit.EngineSendfile], sf1+int64(len(want))-sniffLen) - sf1; d < int64(len(want))-sniffLen {
			t.Errorf("%s warm: %d bytes with sendfile of %d", name, d, len(want))
		}
	}
}

// freshColdFile writes a new file of size random bytes under root, syncs
// and evicts it, and checks that none of it is resident.
func freshColdFile(t *testing.T, root string, size int) (string, []byte) {
	t.Helper()
	b := make([]byte, size)
	rand.NewChaCha8([32]byte{byte(time.Now().UnixNano())}).Read(b)
	f, err := os.CreateTemp(root, "fresh-*.bin")
	if err != nil {
		t.Fatal(err)
	}
	f.Write(b)
	f.Sync()
	f.Close()
	if err := prewarm.Evict(f.Name()); err != nil {
		t.Fatal(err)
	}
	if r, err := prewarm.FileResidency(f.Name()); err != nil || r.Resident != 0 {
		t.Fatalf("%s: %+v, %v after eviction: the test would prove nothing", f.Name(), r, err)
	}
	return "/" + filepath.Base(f.Name()), b
}

// coldTries is how many freshly evicted files a test of the cold path
// asks for until one is read cold: the whole suite sometimes finds a file
// evicted a moment before already back in the page cache when the
// request's no-wait read looks (about one full run in two on this VM,
// never in a test alone; the reader was not found), and a body served
// from the page cache says nothing about the cold path.
const coldTries = 3

// TestSmallBodiesReadWithoutWaiting: a small body that is not known to be
// resident is read with one RWF_NOWAIT read instead of a mincore probe.
// Cold, the request takes the ring's path: the no-wait read finds nothing
// (it only starts the kernel's readahead) and the ring reads the body
// (TestColdSmallBodySkipsTheProbe); if readahead was quick, the no-wait
// read takes it all. Warm, the no-wait read takes
// the whole body (counted as copy) and neither the ring nor sendfile is
// used. Ranges of a small file go the same way.
func TestSmallBodiesReadWithoutWaiting(t *testing.T) {
	root, files := coldTree(t, 3, 20<<10+33)
	port := ringSite(t, root)
	c := &http.Client{Timeout: 30 * time.Second}
	for name, want := range files {
		url := fmt.Sprintf("http://127.0.0.1:%d%s", port, name)
		ringReq0, copyReq0 := counters.requests[transmit.EngineIOUring].Load(), counters.requests[transmit.EngineCopy].Load()
		if status, _, got := get(t, c, url); status != 200 || !bytes.Equal(got, want) {
			t.Fatalf("%s cold: status %d, %d bytes", name, status, len(got))
		}
		deadline := time.Now().Add(2 * time.Second)
		for counters.requests[transmit.EngineIOUring].Load()-ringReq0+counters.requests[transmit.EngineCopy].Load()-copyReq0 < 1 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if n := counters.requests[transmit.EngineIOUring].Load() - ringReq0 + counters.requests[transmit.EngineCopy].Load() - copyReq0; n != 1 {
			t.Errorf("%s cold: %d requests on the ring's path or the no-wait read, want 1", name, n)
		}
		// Warm now, but past the second in which a file seen whole skips
		// the question: the no-wait read answers it.
		time.Sleep(1100 * time.Millisecond)
		for try := 1; ; try++ {
			// The premise, warm, is checked just before the pair where this
			// process can see the page cache (mincore answers a non-owner
			// nothing): this VM pages out what it sees idle
			// (docs/benchmarks.md), and a body it took away since the cold
			// request is read back, and the pair asked again.
			r, rerr := prewarm.FileResidency(filepath.Join(root, name))
			if rerr == nil && r.Known && r.Resident < r.Size && try < coldTries {
				t.Logf("%s warm (try %d of %d): %d of %d bytes resident before the pair; read back, again", name, try, coldTries, r.Resident, r.Size)
				get(t, c, url)
				time.Sleep(1100 * time.Millisecond)
				continue
			}
			ring1, copy1, creq1 := counters.bytes[transmit.EngineIOUring].Load(), counters.bytes[transmit.EngineCopy].Load(), counters.requests[transmit.EngineCopy].Load()
			sf1 := counters.bytes[transmit.EngineSendfile].Load()
			req, _ := http.NewRequest("GET", url, nil)
			req.Header.Set("Range", "bytes=100-4195")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			part, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 206 || !bytes.Equal(part, want[100:4196]) {
				t.Fatalf("%s warm range: status %d, %d bytes", name, resp.StatusCode, len(part))
			}
			if status, _, got := get(t, c, url); status != 200 || !bytes.Equal(got, want) {
				t.Fatalf("%s warm: status %d", name, status)
			}
			copied := counterReaches(&counters.bytes[transmit.EngineCopy], copy1+4096+int64(len(want))) - copy1
			copies := counterReaches(&counters.requests[transmit.EngineCopy], creq1+2) - creq1
			ring, sf := counters.bytes[transmit.EngineIOUring].Load()-ring1, counters.bytes[transmit.EngineSendfile].Load()-sf1
			if copied != 4096+int64(len(want)) {
				t.Errorf("%s warm: %d bytes read without waiting, want %d", name, copied, 4096+len(want))
			}
			if copies != 2 {
				t.Errorf("%s warm: %d requests counted as copy, want 2", name, copies)
			}
			if ring != 0 {
				t.Errorf("%s warm: %d bytes through io_uring, want 0 (before the pair: %+v, %v)", name, ring, r, rerr)
			}
			if sf != 0 {
				t.Errorf("%s warm: %d bytes by sendfile, want 0 (the no-wait read took them)", name, sf)
			}
			break
		}
	}
}

// TestRingFailureDegrades makes every io_uring read fail as cancelled:
// each transfer goes on with pread, and no response fails.
func TestRingFailureDegrades(t *testing.T) {
	root, files := coldTree(t, 3, 1<<20+77)
	port := freePort(t)
	loadSites(t, "", siteBlock(port, root, flashServe("transmit io_uring")))
	if ok, err := sharedRing(t); !ok {
		t.Fatalf("io_uring should work on this kernel: %v", err)
	}
	ringtest.InjectFailures(1 << 20)
	defer ringtest.InjectFailures(0)
	fallbacks := transmit.Snapshot().RingFallbacks
	c := &http.Client{Timeout: 30 * time.Second}
	for name, want := range files {
		if status, _, got := get(t, c, fmt.Sprintf("http://127.0.0.1:%d%s", port, name)); status != 200 || !bytes.Equal(got, want) {
			t.Fatalf("%s with io_uring failing: status %d, %d bytes", name, status, len(got))
		}
	}
	if transmit.Snapshot().RingFallbacks == fallbacks {
		t.Error("no read fell back to pread: the failures were not injected")
	}
}

// TestRingUnavailableAtStart disables io_uring with the kernel's own
// switch before the ring is made: the handler says why, once, and serves
// every body without it.
func TestRingUnavailableAtStart(t *testing.T) {
	const knob = "/proc/sys/kernel/io_uring_disabled"
	old, err := os.ReadFile(knob)
	if err != nil {
		t.Fatalf("this kernel has no %s: %v", knob, err)
	}
	if os.Geteuid() != 0 {
		t.Skip("setting kernel.io_uring_disabled needs root (CI runs as root)")
	}
	if err := os.WriteFile(knob, []byte("2"), 0o644); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			os.WriteFile(knob, old, 0o644)
			restored = true
		}
	}
	defer restore()

	root, files := coldTree(t, 2, 600<<10)
	port := freePort(t)
	logFile := filepath.Join(t.TempDir(), "caddy.log")
	loadSites(t, fmt.Sprintf("log {\n\t\toutput file %s\n\t\tlevel WARN\n\t}", logFile),
		siteBlock(port, root, flashServe("transmit io_uring")))
	restore() // the ring was tried at provision; the switch can go back
	if ok, err := sharedRing(t); ok || err == nil {
		t.Fatal("a ring was made with kernel.io_uring_disabled=2")
	}
	ring0 := counters.bytes[transmit.EngineIOUring].Load()
	c := &http.Client{Timeout: 30 * time.Second}
	for name, want := range files {
		if status, _, got := get(t, c, fmt.Sprintf("http://127.0.0.1:%d%s", port, name)); status != 200 || !bytes.Equal(got, want) {
			t.Fatalf("%s without io_uring: status %d", name, status)
		}
	}
	if counters.bytes[transmit.EngineIOUring].Load() != ring0 {
		t.Error("bytes counted as io_uring without a ring")
	}
	b, _ := os.ReadFile(logFile)
	if n := strings.Count(string(b), "io_uring is unavailable"); n != 1 || !strings.Contains(string(b), "io_uring_disabled") {
		t.Errorf("want one warning naming kernel.io_uring_disabled; the log has %d:\n%s", n, b)
	}
}

// TestColdStormHoldsFewThreads sends 400 concurrent requests for 400
// files that are not in the page cache: lookups hold at most stat_workers
// threads and bodies are read through io_uring, so the OS threads stay
// bounded, where blocking reads would hold one each.
func TestColdStormHoldsFewThreads(t *testing.T) {
	root, files := coldTree(t, 400, 128<<10)
	port := freePort(t)
	loadSites(t, "", siteBlock(port, root, flashServe("stat_workers 8")))
	tr := &http.Transport{MaxIdleConnsPerHost: 400}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	get(t, c, fmt.Sprintf("http://127.0.0.1:%d/c0000.bin", port))
	base := proctest.Threads(t)
	var peak atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				if n := int64(proctest.Threads(t)); n > peak.Load() {
					peak.Store(n)
				}
			}
		}
	}()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for name, want := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, name))
			if err != nil {
				t.Error(err)
				return
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !bytes.Equal(got, want) {
				t.Errorf("%s: status %d, %d bytes", name, resp.StatusCode, len(got))
			}
		}()
	}
	close(start)
	wg.Wait()
	close(stop)
	sampler.Wait()
	t.Logf("threads: %d before, peak %d during 400 cold requests", base, peak.Load())
	// The test's own 400 clients run in this process too; they park on the
	// netpoller as well, so the bound holds for both.
	if peak.Load() > int64(base+8+8) {
		t.Errorf("400 cold requests raised the threads from %d to %d; want at most stat_workers (8) + 8 more", base, peak.Load())
	}
}

// TestColdSmallBodySkipsTheProbe: a small body whose first page the
// no-wait read finds missing goes to the ring at once, without a residency
// probe (mmap, mincore, munmap) to ask again what that read has just
// answered. A body whose first page is resident and the rest not still
// gets its probe, which sends the resident part.
func TestColdSmallBodySkipsTheProbe(t *testing.T) {
	const size = 20 << 10
	root, files := coldTree(t, 4, size)
	port := ringSite(t, root)
	c := &http.Client{Timeout: 30 * time.Second}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	// The last two: the first page resident, the rest evicted.
	// keepFirstPage reads the file's first page and evicts the rest.
	keepFirstPage := func(name string) {
		f, err := os.Open(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		f.ReadAt(make([]byte, 4096), 0)
		unix.Fadvise(int(f.Fd()), 4096, size-4096, unix.FADV_DONTNEED)
		f.Close()
	}
	for _, name := range names[2:] {
		keepFirstPage(name)
	}
	for i, name := range names {
		r, err := prewarm.FileResidency(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(i/2) * 4096; r.Resident != want {
			t.Fatalf("%s: %d bytes resident before the request, want %d: the test would prove nothing", name, r.Resident, want)
		}
	}
	// firstPageOnly makes a fresh file whose first page alone is resident.
	firstPageOnly := func() (string, []byte) {
		name, want := freshColdFile(t, root, size)
		keepFirstPage(name)
		return name, want
	}
	// request asks for name once and reports what the server did: its
	// residency probes, the bytes it read through the ring, the bodies it
	// counted as cold (its no-wait read or a probe found data missing), and
	// whether the file held only its first page just before the request
	// (this VM pages out what it sees idle: docs/benchmarks.md).
	request := func(name string, want []byte, firstPage bool) (probes, ring, cold int64, held bool) {
		held = true
		if firstPage {
			r, err := prewarm.FileResidency(filepath.Join(root, name))
			held = err == nil && r.Resident == 4096
		}
		st0, ring0 := transmit.Snapshot(), counters.bytes[transmit.EngineIOUring].Load()
		if status, _, got := get(t, c, fmt.Sprintf("http://127.0.0.1:%d%s", port, name)); status != 200 || !bytes.Equal(got, want) {
			t.Fatalf("%s: status %d, %d bytes", name, status, len(got))
		}
		ring = counterReaches(&counters.bytes[transmit.EngineIOUring], ring0+1) - ring0
		st := transmit.Snapshot()
		return st.ResidencyProbes - st0.ResidencyProbes, ring, st.ColdBodies - st0.ColdBodies, held
	}
	for i, name := range names {
		probes, ring, cold, held := request(name, files[name], i >= 2)
		t.Logf("%s (%d of %d bytes resident): %d probes, %d bytes through io_uring, %d cold bodies", name, i/2*4096, size, probes, ring, cold)
		if i < 2 {
			for try := 1; ring == 0 && probes == 0 && try < coldTries; try++ {
				// Served whole by the no-wait read: found in the page cache.
				t.Logf("%s was back in the page cache when the request read it; a fresh evicted file (%d of %d)", name, try+1, coldTries)
				var want []byte
				name, want = freshColdFile(t, root, size)
				probes, ring, cold, _ = request(name, want, false)
				t.Logf("%s (cold): %d probes, %d bytes through io_uring", name, probes, ring)
			}
			if probes != 0 {
				t.Errorf("%s cold: %d residency probes, want 0 (the no-wait read found the first page missing)", name, probes)
			}
			if ring != size {
				t.Errorf("%s cold: %d bytes through io_uring, want %d", name, ring, size)
			}
			continue
		}
		for try := 1; try < coldTries; try++ {
			// Two ways the premise fails, each seen by what the request
			// did not do: the first page was paged out before the request
			// (held), or the no-wait read had the rest from the disk within
			// the call (served whole by it, 0 ring bytes, and counted as a
			// body that met the disk).
			whole := ring == 0 && probes == 0 && cold > 0
			if held && !whole {
				break
			}
			t.Logf("%s: first page alone resident before the request %v, served whole by the no-wait read from the disk %v; a fresh file (%d of %d)", name, held, whole, try+1, coldTries)
			var want []byte
			name, want = firstPageOnly()
			probes, ring, cold, held = request(name, want, true)
			t.Logf("%s (first page resident): %d probes, %d bytes through io_uring, %d cold bodies", name, probes, ring, cold)
		}
		if probes == 0 {
			t.Errorf("%s first page resident: no residency probe, want one to send the resident part (%d bytes through io_uring, %d cold bodies, first page alone resident before it %v)", name, ring, cold, held)
		}
	}
}

// TestDefaultStatWorkers: without stat_workers a handler's lookups and
// its ring's io-wq share the default bound, 32 (or 4 per CPU if more), as
// many as nginx's `aio threads` pool has readers: a miss on a cold inode
// holds its worker for a disk read, so the pool is the metadata queue
// depth on a cold tree.
func TestDefaultStatWorkers(t *testing.T) {
	root, _ := coldTree(t, 1, 100)
	port := ringSite(t, root)
	c := &http.Client{Timeout: 30 * time.Second}
	if status, _, _ := get(t, c, fmt.Sprintf("http://127.0.0.1:%d/c0000.bin", port)); status != 200 {
		t.Fatalf("status %d", status)
	}
	want := max(32, 4*runtime.GOMAXPROCS(0))
	n := 0
	caches.Range(func(_, v any) bool {
		n++
		if got := v.(*sharedCache).Options().Workers; got != want {
			t.Errorf("cache workers %d, want %d", got, want)
		}
		return true
	})
	if n == 0 {
		t.Fatal("no shared cache")
	}
	if got := ringtest.Workers(); got != want {
		t.Errorf("ring io-wq cap %d, want %d (stat_workers)", got, want)
	}
}

// TestColdBodiesAreCounted: a body the page cache did not hold, read
// through the ring, counts once in ColdBodies, with its time, and the hot
// set's warm-up then sees requests waiting for the disk (coldRequests,
// its Cold); the same body again, now resident, counts nothing.
func TestColdBodiesAreCounted(t *testing.T) {
	root, files := coldTree(t, 2, 20<<10)
	port := ringSite(t, root)
	c := &http.Client{Timeout: 30 * time.Second}
	for name, want := range files {
		for _, pass := range []string{"cold", "resident"} {
			var before, after transmit.Stats
			var asked int64
			for try := range coldTries {
				if try > 0 {
					if after.ColdBodies != before.ColdBodies || pass != "cold" {
						break
					}
					t.Logf("%s was back in the page cache when the request read it; a fresh evicted file (%d of %d)", name, try+1, coldTries)
					name, want = freshColdFile(t, root, 20<<10)
				}
				before = transmit.Snapshot()
				asked = time.Now().UnixNano()
				if status, _, got := get(t, c, fmt.Sprintf("http://127.0.0.1:%d%s", port, name)); status != 200 || !bytes.Equal(got, want) {
					t.Fatalf("%s %s: status %d, %d bytes", name, pass, status, len(got))
				}
				after = transmit.Snapshot()
			}
			signal, since := coldRequests.serving(), time.Duration(time.Now().UnixNano()-after.LastColdBody)
			d := after.ColdBodies - before.ColdBodies
			t.Logf("%s %s: ColdBodies +%d, the last %v ago", name, pass, d, since)
			switch {
			case pass == "cold" && (d != 1 || after.LastColdBody < asked):
				t.Errorf("%s cold: ColdBodies +%d, the last at %d (asked at %d); want 1, counted after the request began", name, d, after.LastColdBody, asked)
			case pass == "cold" && !signal && since < busyWindow/2:
				t.Errorf("%s cold: the warm-up does not see a request that waited for the disk %v ago", name, since)
			case pass == "resident" && (d != 0 || after.LastColdBody != before.LastColdBody):
				t.Errorf("%s resident: ColdBodies +%d, LastColdBody moved %v; want neither", name, d, after.LastColdBody != before.LastColdBody)
			}
		}
	}
}
