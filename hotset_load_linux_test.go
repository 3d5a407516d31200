//go:build linux

package flashserve

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// TestConfigLoadDoesNotWaitForTheHotSetFile: "start-up never waits" for
// prewarm (docs/prewarm.md), but since e1989a2 the hot-set saver, started
// in Provision, reads and parses the saved set there (StartSaver's Load,
// for Counter.Carry): a start, or a reload that makes a new cache, waits
// for the hot-set file. That is 190-330 ms for a set at the 131,072-file
// bound (9.4 MB of JSON, measured on this machine without -race; 3.1 s
// with it), unbounded for a larger or corrupt file, and forever for a data
// directory on a hung network mount; the warm-up then parses the file a
// second time. A FIFO in place of the hot-set file stands for a read that
// does not answer: the config load must return without waiting for it.
func TestConfigLoadDoesNotWaitForTheHotSetFile(t *testing.T) {
	data := t.TempDir()
	t.Setenv("XDG_DATA_HOME", data)
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "a.txt"), []byte("a"), 0o644)
	port := freePort(t)
	var g caddyGlobals
	text := g.text(t) + siteBlock(port, root, flashServe("prewarm none-*"))
	loadSites(t, "", siteBlock(port, root, flashServe("prewarm none-*")))
	c := &http.Client{Timeout: 10 * time.Second}
	if s, _, _ := get(t, c, fmt.Sprintf("http://127.0.0.1:%d/a.txt", port)); s != 200 {
		t.Fatalf("a.txt: %d", s)
	}
	c.CloseIdleConnections()
	if err := caddy.Stop(); err != nil { // the saver saves
		t.Fatal(err)
	}
	saved, _ := filepath.Glob(filepath.Join(data, "caddy", "flash_serve", "hotset-*.json"))
	if len(saved) != 1 {
		t.Fatalf("hot-set files after the stop: %v, want one", saved)
	}
	path := saved[0]
	os.Remove(path)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	cfg := adaptCaddyfile(t, text)
	loaded := make(chan error, 1)
	start := time.Now()
	// The FIFO's writer (below) stops after caddy.Stop (cleanups run last
	// in, first out): the warm-up reads the hot-set file too, and Stop
	// waits for the warm-up.
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() { loaded <- caddy.Load(cfg, true) }()
	t.Cleanup(func() { caddy.Stop() })
	var err error
	got := false
	select {
	case err = <-loaded:
		got = true
		t.Logf("the config loaded in %v", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Error("the config load did not return within 5 s while the hot-set file could not be read")
	}
	// Let any reader of the FIFO go (a corrupt set), until a save
	// replaces it or the test ends.
	go func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if info, err := os.Lstat(path); err != nil || info.Mode()&os.ModeNamedPipe == 0 {
				return // a save replaced the FIFO
			}
			if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Write([]byte("{not json"))
				f.Close()
			} else if !errors.Is(err, syscall.ENXIO) {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	if !got {
		select {
		case err = <-loaded:
		case <-time.After(20 * time.Second):
			t.Fatal("the config load still blocked 20 s after its hot-set FIFO was written")
		}
	}
	if err != nil {
		t.Fatalf("loading: %v", err)
	}
}
