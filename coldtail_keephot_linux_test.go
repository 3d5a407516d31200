//go:build linux && !flashserve_portable

package flashserve

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"

	"github.com/flashserve/caddy-flash-serve/internal/fusetest"
	"github.com/flashserve/caddy-flash-serve/prewarm"
	"github.com/flashserve/caddy-flash-serve/transmit"
)

// slowOpenFile is a FUSE file whose opens take 20 ms each: a warm-up's
// opens in flight at once show whether it takes turns (one batch, whose
// opens go one after the other) or reads at full width (one per worker).
type slowOpenFile struct {
	fs.Inode
	in, most *atomic.Int64
}

func (f *slowOpenFile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o644
	out.Size = 4096
	out.Mtime = 1_700_000_000
	return 0
}

func (f *slowOpenFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n := f.in.Add(1)
	for {
		m := f.most.Load()
		if n <= m || f.most.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(20 * time.Millisecond)
	f.in.Add(-1)
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (f *slowOpenFile) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n := max(0, min(int64(len(dest)), 4096-off))
	return fuse.ReadResultData(make([]byte, n)), 0
}

type slowOpenRoot struct {
	fs.Inode
	n        int
	in, most atomic.Int64
}

func (r *slowOpenRoot) OnAdd(ctx context.Context) {
	for i := range r.n {
		r.AddChild(fmt.Sprintf("h%03d", i), r.NewPersistentInode(ctx, &slowOpenFile{in: &r.in, most: &r.most}, fs.StableAttr{Mode: syscall.S_IFREG}), false)
	}
}

// TestTailColdReadsKeepTheKeepHotTurns: a long-tail media site always
// has some request reading a file the page cache does not hold, so
// transmit's ColdBodies moves every few milliseconds, all day. The
// keep_hot pass then reads its hot set at full width (9eaeba3), though
// the requests waiting for the disk wait for tail files that are not in
// it: what it reads is not what they wait for, and its CPU (and its disk
// queue) is taken from the requests served from memory beside them, each
// keep_hot interval. Expected: while the only cold reads are of files
// outside the set the pass reads, and a response is in flight, the pass
// takes turns as before: one batch at a time, its opens one after the
// other.
func TestTailColdReadsKeepTheKeepHotTurns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE without fusermount needs root (CI runs as root)")
	}
	hot := &slowOpenRoot{n: 96}
	mnt, server := fusetest.Mount(t, hot, fuse.MountOptions{DirectMount: true, DisableSplice: true, FsName: "flashserve-test", Name: "slowopen", MaxBackground: 64})
	t.Cleanup(func() { server.Unmount() })

	// The site: a large body in flight to a client that reads no more
	// (requests are being served all along), and a tail file read cold
	// every 20 ms (evicted before each request).
	tailRoot, tail := coldTree(t, 1, 20<<10)
	big := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(big, make([]byte, 32<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(big, filepath.Join(tailRoot, "big.bin")); err != nil {
		// another file system: copy instead
		b, _ := os.ReadFile(big)
		if err := os.WriteFile(filepath.Join(tailRoot, "big.bin"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.Remove(filepath.Join(tailRoot, "big.bin")) })
	port := ringSite(t, tailRoot)
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(conn, make([]byte, 1024)); err != nil {
		t.Fatal(err)
	}
	var tailName string
	for name := range tail {
		tailName = name
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c := &http.Client{Timeout: 10 * time.Second}
		defer c.CloseIdleConnections()
		for {
			select {
			case <-stop:
				return
			default:
			}
			prewarm.Evict(filepath.Join(tailRoot, tailName))
			if resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, tailName)); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	waitFor(t, "a response in flight and a tail file read cold", 10*time.Second, func() bool { return sent.serving() && coldRequests.serving() })

	var targets []prewarm.Target
	for i := range hot.n {
		targets = append(targets, prewarm.Target{Path: filepath.Join(mnt, fmt.Sprintf("h%03d", i)), Size: 4096})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	warm(ctx, zap.NewNop(), targets, 0, 4, "keep_hot", nil, nil, 0)
	t.Logf("keep_hot over %d hot files, 4 workers, tail cold reads and a response in flight: at most %d opens at once, %v", hot.n, hot.most.Load(), time.Since(start))
	if most := hot.most.Load(); most > 1 {
		t.Errorf("the keep_hot pass had %d opens in flight at once while the only cold reads were of a file outside its set: it read at full width, want one batch at a time (its opens one after the other)", most)
	}
}

// TestAnOldColdBodyIsNoColdRequestNow: coldRequests learns that
// ColdBodies moved only when a warm-up asks, and then counts the move as
// "now" (responses.serving). Nobody asks while the server is idle, nor
// between two keep_hot passes, so a request that waited for the disk
// minutes ago makes the next warm-up read at full width for a window as
// if requests were waiting now. (The fd-pressure signal of the same
// kind starts from the count at the warm-up's start for that reason.)
// Expected: a cold body three windows ago, with no look at the signal
// since, is not a request waiting for the disk now.
func TestAnOldColdBodyIsNoColdRequestNow(t *testing.T) {
	root, files := coldTree(t, 1, 20<<10)
	port := ringSite(t, root)
	c := &http.Client{Timeout: 30 * time.Second}
	defer c.CloseIdleConnections()
	coldRequests.serving() // takes in what came before
	for name := range files {
		var d int64
		for try := range coldTries {
			if try > 0 {
				t.Logf("%s was back in the page cache when the request read it; a fresh evicted file (%d of %d)", name, try+1, coldTries)
				name, _ = freshColdFile(t, root, 20<<10)
			}
			cold0 := transmit.Snapshot().ColdBodies
			if status, _, _ := get(t, c, fmt.Sprintf("http://127.0.0.1:%d%s", port, name)); status != 200 {
				t.Fatalf("%s: status %d", name, status)
			}
			if d = transmit.Snapshot().ColdBodies - cold0; d != 0 {
				break
			}
		}
		if d != 1 {
			t.Fatalf("%s read cold: ColdBodies +%d, want 1", name, d)
		}
	}
	// The time is the point here: the body is three windows old.
	time.Sleep(3 * busyWindow)
	if coldRequests.serving() {
		t.Errorf("a body read cold %v ago, with no request since, counts as requests waiting for the disk now", 3*busyWindow)
	}
}
