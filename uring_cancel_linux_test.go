//go:build linux && !flashserve_portable

package flashserve

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/flashserve/caddy-flash-serve/internal/fusetest"
	"github.com/flashserve/caddy-flash-serve/internal/ringtest"
)

// stallFile is a direct-I/O FUSE file whose reads can be made to hang:
// until release closes, or (unless ignoreCancel) until the kernel
// interrupts them.
type stallFile struct {
	fs.Inode
	size         int64
	release      chan struct{} // nil: reads answer at once
	ignoreCancel bool
	blocked      atomic.Int64
}

func (f *stallFile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o644
	out.Size = uint64(f.size)
	out.Mtime = 1_700_000_000
	return 0
}

func (f *stallFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (f *stallFile) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if f.release != nil {
		f.blocked.Add(1)
		defer f.blocked.Add(-1)
		var interrupted <-chan struct{}
		if !f.ignoreCancel {
			interrupted = ctx.Done()
		}
		select {
		case <-f.release:
		case <-interrupted:
			return nil, syscall.EINTR
		}
	}
	n := max(0, min(int64(len(dest)), f.size-off))
	for i := range n {
		dest[i] = patternByte(off + i)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

type stallRoot struct {
	fs.Inode
	files map[string]*stallFile
}

func (r *stallRoot) OnAdd(ctx context.Context) {
	for name, f := range r.files {
		r.AddChild(name, r.NewPersistentInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG}), false)
	}
}

// TestStalledFileLetsGo: 300 HTTP clients of a FUSE file whose reads
// hang leave; meanwhile another FUSE file and a disk file are served;
// afterwards the ring's slots, the goroutines and the descriptors are back
// to the baseline. Then caddy.Stop, with reads whose FUSE server ignores
// interrupts, returns within the ring's 3 s close bound (plus margin).
func TestStalledFileLetsGo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE without fusermount needs root (CI runs as root)")
	}
	hang := &stallFile{size: 8 << 20, release: make(chan struct{})}
	stuck := &stallFile{size: 8 << 20, release: make(chan struct{}), ignoreCancel: true}
	good := &stallFile{size: 1 << 20}
	mnt, server := fusetest.Mount(t, &stallRoot{files: map[string]*stallFile{"hang.bin": hang, "stuck.bin": stuck, "good.bin": good}},
		fuse.MountOptions{DirectMount: true, DisableSplice: true, FsName: "flashserve-test", Name: "stall", MaxBackground: 512})
	var released sync.Once
	releaseAll := func() {
		released.Do(func() {
			close(hang.release)
			close(stuck.release)
		})
	}
	t.Cleanup(func() {
		releaseAll()
		server.Unmount()
	})
	diskRoot, diskFiles := coldTree(t, 2, 1<<20+17)

	fusePort, diskPort := freePort(t), freePort(t)
	loadSites(t, "", siteBlock(fusePort, mnt, flashServe("transmit io_uring", "inotify off", "stat_workers 8"))+
		siteBlock(diskPort, diskRoot, flashServe("stat_workers 8")))
	if ok, err := sharedRing(t); !ok {
		t.Fatalf("io_uring should work on this kernel: %v", err)
	}
	ringDone := ringtest.Done()
	c := &http.Client{Timeout: 30 * time.Second}
	checkOthers := func(when string) {
		t.Helper()
		if status, _, body := get(t, c, fmt.Sprintf("http://127.0.0.1:%d/good.bin", fusePort)); status != 200 || len(body) != 1<<20 || body[5000] != patternByte(5000) {
			t.Errorf("%s: good.bin on FUSE: status %d, %d bytes", when, status, len(body))
		}
		for name, want := range diskFiles {
			if status, _, body := get(t, c, fmt.Sprintf("http://127.0.0.1:%d%s", diskPort, name)); status != 200 || !bytes.Equal(body, want) {
				t.Errorf("%s: %s on disk: status %d, %d bytes", when, name, status, len(body))
			}
		}
	}
	// Warm the caches, so that their descriptors are in the baseline.
	checkOthers("before")
	for _, name := range []string{"hang.bin", "stuck.bin"} {
		if resp, err := c.Head(fmt.Sprintf("http://127.0.0.1:%d/%s", fusePort, name)); err == nil {
			resp.Body.Close()
		}
	}
	c.CloseIdleConnections()
	base := settledResources(t)
	if ops, files := ringtest.Busy(); ops != 0 || files != 0 {
		t.Fatalf("the ring is busy before the test: %d operations, %d files", ops, files)
	}

	const clients = 300
	tr := &http.Transport{DisableKeepAlives: true, MaxConnsPerHost: 0}
	hc := &http.Client{Transport: tr}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var answered atomic.Int64
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://127.0.0.1:%d/hang.bin", fusePort), nil)
			resp, err := hc.Do(req)
			if err == nil {
				// The headers may come before the body stalls.
				_, err = bytes.NewBuffer(nil).ReadFrom(resp.Body)
				resp.Body.Close()
			}
			if err == nil {
				answered.Add(1)
			}
		}()
	}
	// Every client's request reaches the handler (a goroutine each on
	// both sides), and only max(2, stat_workers/4) reads of the file reach
	// the FUSE server.
	reached := waitUntil(20*time.Second, func() bool {
		return hang.blocked.Load() == 2 && runtime.NumGoroutine() >= base.goroutines+2*clients
	})
	ops, files := ringtest.Busy()
	t.Logf("%d clients: reads blocked in the server %d, goroutines %d (baseline %d), ring operations %d, files %d (all reached: %v)",
		clients, hang.blocked.Load(), runtime.NumGoroutine(), base.goroutines, ops, files, reached)
	if n := hang.blocked.Load(); n != 2 {
		t.Errorf("%d reads of the hanging file in the server, want max(2, 8/4) = 2", n)
	}
	if ops > 2 {
		t.Errorf("%d ring operations for one hanging file, want at most 2", ops)
	}
	// Readers waiting for their turn hold no cold chunk.
	if n := ringtest.ColdChunksLent(); n > 2 {
		t.Errorf("%d cold chunks lent with 2 reads in the kernel and %d readers waiting", n, clients-2)
	}
	checkOthers("with the hanging file's readers waiting")
	start := time.Now()
	cancel()
	wg.Wait()
	tr.CloseIdleConnections()
	t.Logf("the %d clients left in %v", clients, time.Since(start))
	if answered.Load() != 0 {
		t.Errorf("%d clients of the hanging file got a whole body", answered.Load())
	}
	if !waitUntil(20*time.Second, func() bool { ops, files := ringtest.Busy(); return ops == 0 && files == 0 && hang.blocked.Load() == 0 }) {
		ops, files := ringtest.Busy()
		t.Errorf("after the clients left: %d ring operations, %d files, %d reads blocked in the server", ops, files, hang.blocked.Load())
	}
	backToBaseline(t, base, base.threads+16)
	checkOthers("after")

	// Reads the FUSE server never lets go of: stopping Caddy waits for
	// them at most the ring's 3 s close bound.
	stopCtx, stopCancel := context.WithCancel(context.Background())
	defer stopCancel()
	for range 3 {
		go func() {
			req, _ := http.NewRequestWithContext(stopCtx, "GET", fmt.Sprintf("http://127.0.0.1:%d/stuck.bin", fusePort), nil)
			if resp, err := hc.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	if !waitUntil(20*time.Second, func() bool { return stuck.blocked.Load() == 2 }) {
		t.Fatalf("%d reads of stuck.bin in the server, want 2", stuck.blocked.Load())
	}
	start = time.Now()
	caddy.Stop()
	took := time.Since(start)
	t.Logf("caddy.Stop with 2 reads the server ignores cancellation of: %v", took)
	if took > 10*time.Second {
		t.Errorf("caddy.Stop took %v with stalled reads; want about the ring's 3 s close bound", took)
	}
	stopCancel()
	releaseAll()
	select {
	case <-ringDone:
	case <-time.After(20 * time.Second):
		t.Error("the abandoned ring was not torn down once its reads completed")
	}
}

// waitUntil polls cond every 10 ms for up to d and reports whether it
// held.
func waitUntil(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}
