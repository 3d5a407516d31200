//go:build linux && !flashserve_portable

package statacc

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestClosedCacheAnswersUncached: a closed cache (the Destruct of a
// config reload that changed a cache setting, while the old server's
// requests still run) answers every lookup as an open cache would, with
// an entry that only the caller holds: its Release closes the descriptor,
// and a second lookup opens the file again, since nothing is cached.
func TestClosedCacheAnswersUncached(t *testing.T) {
	dir := t.TempDir()
	body := bytes.Repeat([]byte("closed cache "), 1000)
	file := filepath.Join(dir, "a.txt")
	if err := os.WriteFile(file, body, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/hostname", filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	c := New(Options{Workers: 2})
	if e, err := c.Get(context.Background(), file); err != nil {
		t.Fatal(err)
	} else {
		e.Release() // cached before the close: Close's flush drops it
	}
	c.Close()

	ctx := context.Background()
	e, err := c.Get(ctx, file)
	if err != nil {
		t.Fatalf("a file after Close: %v, want its entry", err)
	}
	if got, err := e.ReadAll(); err != nil || !bytes.Equal(got, body) || e.Size() != int64(len(body)) {
		t.Fatalf("a file after Close: %d bytes, size %d, %v; want the file's %d", len(got), e.Size(), err, len(body))
	}
	if n := fdsUnder(t, dir); n != 1 {
		t.Fatalf("%d descriptors open below the root while the entry is held; want 1", n)
	}
	again, err := c.Get(ctx, file)
	if err != nil {
		t.Fatal(err)
	}
	if again == e {
		t.Fatal("a closed cache handed the same entry to two lookups: it cached it")
	}
	if n := fdsUnder(t, dir); n != 2 {
		t.Fatalf("%d descriptors open below the root for two held entries; want 2", n)
	}
	e.Release()
	again.Release()
	if n := fdsUnder(t, dir); n != 0 {
		t.Fatalf("%d descriptors open below the root after both releases; want 0", n)
	}
	if n := c.Snapshot()[OpenFiles]; n != 0 {
		t.Fatalf("OpenFiles %d after every release; want 0", n)
	}

	if d, err := c.Get(ctx, filepath.Join(dir, "sub")); err != nil || !d.IsDir() {
		t.Fatalf("a directory after Close: %v", err)
	} else {
		d.Release()
	}
	if _, err := c.Get(ctx, filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing file after Close: %v, want fs.ErrNotExist", err)
	}
	if _, err := c.getConfined(ctx, dir, SymlinksBeneath, filepath.Join(dir, "out")); !IsRefused(err) {
		t.Fatalf("a link out of the root under beneath after Close: %v, want a refusal", err)
	}
	if n := c.entryCount(); n != 0 {
		t.Fatalf("%d entries cached by a closed cache; want 0", n)
	}
}

// TestCloseAnswersQueuedMissesWithEntries: a miss queued for a worker
// when the cache closes gets its file, looked up by its own goroutine
// once the workers are gone, not an error.
func TestCloseAnswersQueuedMissesWithEntries(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a.txt")
	if err := os.WriteFile(file, []byte("queued"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := New(Options{Workers: 1, NoInotify: true})
	// Stop the worker and take the slots, so that the miss stays queued.
	close(c.stop)
	c.wg.Wait()
	c.stop = make(chan struct{})
	for range cap(c.slots) {
		c.slots <- struct{}{}
	}
	type result struct {
		e   *Entry
		err error
	}
	done := make(chan result, 1)
	go func() {
		e, err := c.Get(context.Background(), file)
		done <- result{e, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(c.jobs) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the miss never queued")
		}
		time.Sleep(time.Millisecond)
	}
	for range cap(c.slots) {
		<-c.slots
	}
	c.Close()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("a miss queued when the cache closed: %v, want the file", r.err)
		}
		if b, _ := r.e.ReadAll(); string(b) != "queued" {
			t.Fatalf("a miss queued when the cache closed read %q", b)
		}
		r.e.Release()
	case <-time.After(10 * time.Second):
		t.Fatal("a miss queued when the cache closed is still waiting 10 s later")
	}
	if n := fdsUnder(t, dir); n != 0 {
		t.Fatalf("%d descriptors open below the root after the release; want 0", n)
	}
}

// TestLookupsAcrossCloseNeverFail: lookups of existing files running
// while the cache closes (a reload's Destruct under load) all get their
// file, whether they hit, merged, queued or resolved before, during or
// after Close, and every descriptor is closed once they are released.
func TestLookupsAcrossCloseNeverFail(t *testing.T) {
	dir := t.TempDir()
	paths := manyFiles(t, dir, 4, 250)
	for round := range 20 {
		c := New(Options{Workers: 2, MaxOpenFiles: 4096, Revalidate: time.Hour})
		var failed atomic.Int64
		var firstErr atomic.Value
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; ; i = (i + 16) % len(paths) {
					select {
					case <-stop:
						return
					default:
					}
					e, err := c.Get(context.Background(), paths[i])
					if err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
						continue
					}
					if e.Size() != 8<<10 {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, errors.New("wrong size"))
					}
					e.Release()
				}
			}()
		}
		for c.Snapshot()[Misses] < 200 {
			time.Sleep(time.Millisecond)
		}
		c.Close()
		time.Sleep(20 * time.Millisecond) // lookups of the closed cache
		close(stop)
		wg.Wait()
		if n := failed.Load(); n != 0 {
			t.Fatalf("round %d: %d lookups of existing files failed across Close, the first with %v", round, n, firstErr.Load())
		}
		if n := fdsUnder(t, dir); n != 0 {
			t.Fatalf("round %d: %d descriptors below the root open after Close and every Release; want 0", round, n)
		}
	}
}
