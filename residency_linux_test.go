//go:build linux && !flashserve_portable

package flashserve

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
	"github.com/flashserve/caddy-flash-serve/internal/ringtest"
	"github.com/flashserve/caddy-flash-serve/prewarm"
	"github.com/flashserve/caddy-flash-serve/transmit"
)

// mincoreTrustedFile says whether this process may ask mincore about the
// file: it owns it or may write it (pagecache.Trusted).
func mincoreTrustedFile(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return pagecache.Trusted(int(f.Fd()), info)
}

// cachedAt says whether the page at off is in the page cache, with a
// no-wait read: the only question a process that does not own the file
// gets a true answer to. It starts the kernel's readahead at off when the
// page is missing, so ask it last, or of pages that should be there.
func cachedAt(t *testing.T, path string, off int64) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	n, err := pagecache.ReadNoWait(int(f.Fd()), b[:], off)
	return n == 1 && err == nil
}

// mincoreSays asks mincore whether the page at off is resident, for a
// file it tells this process the truth about.
func mincoreSays(t *testing.T, path string, off int64) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	probe := pagecache.NewProbe(int(f.Fd()), true, 0)
	n, err := probe.Resident(off, 1)
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// evictCold drops a file from the page cache and checks that it is gone:
// with mincore where it tells the truth, asked before any no-wait read;
// else with a no-wait read of the last page, after checking that
// residency reports it as unknown rather than as resident.
func evictCold(t *testing.T, path string, size int64) {
	t.Helper()
	if !mincoreTrustedFile(t, path) {
		if r, err := prewarm.FileResidency(path); err != nil || r.Known {
			t.Fatalf("residency of a file this user neither owns nor may write: %+v, %v; want it unknown", r, err)
		}
	}
	eventually(t, 2*time.Second, func() error {
		if err := prewarm.Evict(path); err != nil {
			t.Fatal(err)
		}
		var cold bool
		if mincoreTrustedFile(t, path) {
			r, err := prewarm.FileResidency(path)
			if err != nil {
				t.Fatal(err)
			}
			// The first page too: the first read of the body must miss.
			cold = r.Resident <= size/100 && !mincoreSays(t, path, 0)
		} else {
			cold = !cachedAt(t, path, size-1)
		}
		if !cold {
			return fmt.Errorf("%s is still in the page cache after DONTNEED: the test would prove nothing", path)
		}
		return nil
	})
}

// who names the case a test runs in, for its messages.
func who(t *testing.T, path string) string {
	if mincoreTrustedFile(t, path) {
		return "the owner"
	}
	return "a user that neither owns the file nor may write it"
}

// TestColdLargeBodyThroughTheRing: a cold 256 MiB body is read through
// io_uring, and arrives exact. Run as a user that does not own the file
// (CI runs it as nobody on root's files), mincore reports it all resident:
// a probe that believed it would send it all with blocking sendfile calls
// and no byte through the ring.
func TestColdLargeBodyThroughTheRing(t *testing.T) {
	const size = 256 << 20
	seed := [32]byte{'c', 'o', 'l', 'd', '-', 'r', 'i', 'n', 'g'}
	root := testDir(t, "large-256m", func(dir string) {
		f, err := os.Create(filepath.Join(dir, "large.bin"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := io.CopyN(f, rand.NewChaCha8(seed), size); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	})
	path := filepath.Join(root, "large.bin")
	sum := sha256.New()
	io.CopyN(sum, rand.NewChaCha8(seed), size)
	want := sum.Sum(nil)
	evictCold(t, path, size)

	port := ringSite(t, root)
	ring0, sf0, copy0 := counters.bytes[transmit.EngineIOUring].Load(), counters.bytes[transmit.EngineSendfile].Load(), counters.bytes[transmit.EngineCopy].Load()
	c := &http.Client{Timeout: 2 * time.Minute}
	start := time.Now()
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/large.bin", port))
	if err != nil {
		t.Fatal(err)
	}
	sum.Reset()
	n, err := io.Copy(sum, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || n != size || !bytes.Equal(sum.Sum(nil), want) {
		t.Fatalf("cold 256 MiB body: status %d, %d bytes (%v), content equal: %v", resp.StatusCode, n, err, bytes.Equal(sum.Sum(nil), want))
	}
	ring := counterReaches(&counters.bytes[transmit.EngineIOUring], ring0+ringtest.ColdChunk) - ring0
	t.Logf("as %s: 256 MiB in %v: %d MiB through io_uring, %d MiB by sendfile, %d MiB copied", who(t, path),
		time.Since(start).Round(time.Millisecond), ring>>20, (counters.bytes[transmit.EngineSendfile].Load()-sf0)>>20, (counters.bytes[transmit.EngineCopy].Load()-copy0)>>20)
	if ring < ringtest.ColdChunk {
		t.Errorf("as %s, a cold 256 MiB body sent %d bytes through io_uring; want its missing spans read there", who(t, path), ring)
	}
}

// residencyReport is what `residency --json` prints.
type residencyReport struct {
	Files         int      `json:"files"`
	Bytes         int64    `json:"bytes"`
	Known         bool     `json:"known"`
	ResidentBytes *int64   `json:"resident_bytes"`
	Percent       *float64 `json:"resident_percent"`
	UnknownFiles  int64    `json:"unknown_files"`
	UnknownBytes  int64    `json:"unknown_bytes"`
	Top           []struct {
		Path          string `json:"path"`
		Known         bool   `json:"known"`
		ResidentBytes *int64 `json:"resident_bytes"`
	} `json:"top"`
}

func residencyJSON(t *testing.T, root string) residencyReport {
	t.Helper()
	js := runCaddyCommand(t, "flash-serve", "residency", "--json", root)
	var r residencyReport
	if err := json.Unmarshal([]byte(js[strings.Index(js, "{"):]), &r); err != nil {
		t.Fatalf("residency --json: %v\n%s", err, js)
	}
	return r
}

// checkReport checks a residency report of the 4 files of 1 MiB: with
// the resident bytes where the process may ask mincore, as unknown where
// it may not (never the 100 % mincore would claim).
func checkReport(t *testing.T, when string, trusted bool, r residencyReport, resident int64) {
	t.Helper()
	if r.Files != 4 || r.Bytes != 4<<20 {
		t.Errorf("%s: residency --json counts %d files, %d bytes; want 4, 4 MiB", when, r.Files, r.Bytes)
	}
	if trusted {
		if !r.Known || r.ResidentBytes == nil || *r.ResidentBytes != resident || r.UnknownFiles != 0 || r.Percent == nil {
			t.Errorf("%s, as the owner: residency --json = %+v; want known, %d bytes resident", when, r, resident)
		}
		return
	}
	if r.Known || r.ResidentBytes != nil || r.Percent != nil || r.UnknownFiles != 4 || r.UnknownBytes != 4<<20 {
		t.Errorf("%s, not the owner: residency --json = known %v, resident %v, percent %v, unknown %d files %d bytes; "+
			"want unknown: null, null, 4 files, 4 MiB", when, r.Known, r.ResidentBytes, r.Percent, r.UnknownFiles, r.UnknownBytes)
	}
	for _, f := range r.Top {
		if f.Known || f.ResidentBytes != nil {
			t.Errorf("%s, not the owner: %s reported known %v, resident %v; want unknown, null", when, f.Path, f.Known, f.ResidentBytes)
		}
	}
}

// TestResidencyReportsOnlyWhatItCanKnow: the residency command, prewarm
// and the admin API's prewarm answer report the true residency of files
// the process owns, and "unknown (not owner)" for the others (CI runs it
// as nobody on root's files), where mincore would claim 100 %. prewarm
// warms the files either way.
func TestResidencyReportsOnlyWhatItCanKnow(t *testing.T) {
	root, files := coldTree(t, 4, 1<<20)
	first := filepath.Join(root, "c0000.bin")
	trusted := mincoreTrustedFile(t, first)
	t.Logf("as %s", who(t, first))
	for name := range files {
		evictCold(t, filepath.Join(root, name), 1<<20)
	}
	checkReport(t, "cold", trusted, residencyJSON(t, root), 0)
	text := runCaddyCommand(t, "flash-serve", "residency", root)
	if got := strings.Contains(text, "Resident bytes: unknown (not owner)"); got == trusted {
		t.Errorf("residency as %s: says unknown %v:\n%s", who(t, first), got, text)
	}
	if n := strings.Count(text, "unknown (not owner)"); !trusted && n != 5 {
		t.Errorf("residency, not the owner: %d lines say unknown, want the total and the 4 files:\n%s", n, text)
	}

	// prewarm warms c0000 and c0001 within its 2 MiB; the report does not
	// change its answer for the files it cannot see.
	runCaddyCommand(t, "flash-serve", "prewarm", root, "--budget", "2MiB")
	var resident int64
	for _, name := range []string{"c0000.bin", "c0001.bin"} {
		p := filepath.Join(root, name)
		if trusted {
			r, err := prewarm.FileResidency(p)
			if err != nil || !r.Known || r.Resident != r.Size {
				t.Errorf("%s after prewarm: %+v, %v; want all of it resident", name, r, err)
			}
			resident += r.Resident
			continue
		}
		for off := int64(0); off < 1<<20; off += int64(os.Getpagesize()) {
			if !cachedAt(t, p, off) {
				t.Fatalf("%s after prewarm: the page at %d is not in the page cache", name, off)
			}
		}
	}
	checkReport(t, "after prewarm", trusted, residencyJSON(t, root), resident)

	// The admin API's prewarm answer, waited for.
	adminPort, sitePort := freePort(t), freePort(t)
	loadSites(t, fmt.Sprintf("admin 127.0.0.1:%d", adminPort), siteBlock(sitePort, root, "flash_serve"))
	status, b := adminCall(t, "POST", fmt.Sprintf("http://127.0.0.1:%d/flash_serve/prewarm", adminPort),
		fmt.Sprintf(`{"root": %q, "paths": ["c0002.bin"], "budget": "64MiB", "wait": true}`, root))
	var answer struct {
		Files         int64  `json:"files"`
		Known         *bool  `json:"known"`
		ResidentBytes *int64 `json:"resident_bytes"`
		UnknownFiles  int64  `json:"unknown_files"`
		UnknownBytes  int64  `json:"unknown_bytes"`
	}
	if err := json.Unmarshal(b, &answer); status != 200 || err != nil || answer.Files != 1 || answer.Known == nil {
		t.Fatalf("prewarm through the admin API: %d %s (%v)", status, b, err)
	}
	if trusted && (!*answer.Known || answer.ResidentBytes == nil || *answer.ResidentBytes != 1<<20 || answer.UnknownFiles != 0) {
		t.Errorf("admin prewarm, as the owner: %s; want known, 1 MiB resident", b)
	}
	if !trusted && (*answer.Known || answer.ResidentBytes != nil || answer.UnknownFiles != 1 || answer.UnknownBytes != 1<<20) {
		t.Errorf("admin prewarm, not the owner: %s; want known false, resident_bytes null, 1 file of 1 MiB unknown", b)
	}
	if !trusted && !cachedAt(t, filepath.Join(root, "c0002.bin"), 1<<20-1) {
		t.Error("admin prewarm, not the owner: c0002.bin's last page is not in the page cache")
	}
	// c0003 was never read: still cold (asked last: the question warms it).
	p := filepath.Join(root, "c0003.bin")
	if trusted {
		if r, _ := prewarm.FileResidency(p); r.Resident != 0 {
			t.Errorf("c0003.bin: %d bytes resident; prewarm read past its budget", r.Resident)
		}
	} else if cachedAt(t, p, 0) {
		t.Error("c0003.bin's first page is in the page cache: prewarm read past its budget")
	}
}

// TestHotLargeBodyCostsNoMincore: the handler's once-a-second probe of a
// large file all in the page cache asks cachestat(2) once, not mincore
// (an mmap, a lookup per page and a munmap: 15-45 ms of CPU for 1 GiB
// here, about 6 % of the server's on a 1 GiB download); the body leaves by
// sendfile, whole. An attempt during which the file was not all resident
// (this VM's page cache drops pages on its own) proves nothing and is made
// again, up to 3 times.
func TestHotLargeBodyCostsNoMincore(t *testing.T) {
	const size = 6<<20 + 1000
	root := t.TempDir()
	want := make([]byte, size)
	rand.NewChaCha8([32]byte{16}).Read(want)
	path := filepath.Join(root, "hot.bin")
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	trusted := mincoreTrustedFile(t, path)
	port := ringSite(t, root)
	c := &http.Client{Timeout: 30 * time.Second}
	url := fmt.Sprintf("http://127.0.0.1:%d/hot.bin", port)
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			// The file is probed once a second: the last attempt's probe
			// must be over a second old for this request to make one.
			time.Sleep(1100 * time.Millisecond)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(io.Discard, f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		m0, c0 := pagecache.Asked()
		sf0 := counters.requests[transmit.EngineSendfile].Load()
		if status, _, got := get(t, c, url); status != 200 || !bytes.Equal(got, want) {
			t.Fatalf("status %d, %d bytes, want %d", status, len(got), len(want))
		}
		m1, c1 := pagecache.Asked()
		sent := counterReaches(&counters.requests[transmit.EngineSendfile], sf0+1) - sf0
		if m1 == m0 && sent == 1 && (!trusted || c1 > c0) {
			t.Logf("attempt %d: 0 mincore, %d cachestat calls, sent by sendfile (mincore trusted: %v)", attempt, c1-c0, trusted)
			return
		}
		if attempt == 3 {
			t.Fatalf("a hot body: %d mincore and %d cachestat calls, %d requests sent by sendfile, 3 times; want 0 mincore, a cachestat (mincore trusted: %v) and 1",
				m1-m0, c1-c0, sent, trusted)
		}
		t.Logf("attempt %d: %d mincore, %d cachestat calls, %d by sendfile: again", attempt, m1-m0, c1-c0, sent)
	}
}
