package flashserve

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/fileserver"
	"go.uber.org/zap"
)

// patternWriter is a wrapper that is not the server's own: it logs the
// size of every write that reaches it.
type patternWriter struct {
	http.ResponseWriter
	log []string
}

func (p *patternWriter) Write(b []byte) (int, error) {
	p.log = append(p.log, fmt.Sprintf("write %d", len(b)))
	return p.ResponseWriter.Write(b)
}

func (p *patternWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }

// patternReaderFrom also has ReadFrom, which reads as encode's does: a
// 512-byte sample through Write, then reads of 100 KiB, each logged.
type patternReaderFrom struct{ *patternWriter }

func (p patternReaderFrom) ReadFrom(r io.Reader) (int64, error) {
	p.log = append(p.log, "readfrom")
	n, err := io.CopyBuffer(struct{ io.Writer }{p.patternWriter}, io.LimitReader(r, 512), make([]byte, 512))
	if err != nil || n < 512 {
		return n, err
	}
	buf := make([]byte, 100<<10)
	for {
		k, err := r.Read(buf)
		if k > 0 {
			p.log = append(p.log, fmt.Sprintf("read %d", k))
			p.ResponseWriter.Write(buf[:k])
			n += int64(k)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// TestWrappedWriterGetsFileServerPattern checks that under a writer that
// is not the server's own, every engine hands the body down the way
// file_server does (io.CopyN: ReadFrom with a reader whose reads are
// filled whole, or else 32 KiB writes), so that a writer whose output
// depends on it (zstd) answers the same bytes.
func TestWrappedWriterGetsFileServerPattern(t *testing.T) {
	root := t.TempDir()
	sizes := []int{100, 1000, 6000, 200_000}
	for _, n := range sizes {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("f%d.txt", n)), []byte(strings.Repeat("z", n)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	fileServer := &fileserver.FileServer{Root: root}
	if err := fileServer.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	newFlash := func(engine string) *FlashServe {
		fsrv := &FlashServe{Root: root, Transmit: engine}
		if err := fsrv.Provision(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fsrv.Cleanup() })
		fsrv.logger = zap.NewNop()
		return fsrv
	}
	flashes := map[string]*FlashServe{"auto": newFlash("auto"), "copy": newFlash("copy")}
	if ring := newFlash("io_uring"); ring.sender.Ring != nil {
		flashes["io_uring"] = ring
	} else {
		t.Log("io_uring unavailable here: the ring engine is not compared")
	}
	next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })
	serve := func(h caddyhttp.MiddlewareHandler, path, rangeHeader string, readFrom bool) []string {
		pw := &patternWriter{ResponseWriter: httptest.NewRecorder()}
		var w http.ResponseWriter = pw
		if readFrom {
			w = patternReaderFrom{pw}
		}
		req := httptest.NewRequest("GET", path, nil)
		if rangeHeader != "" {
			req.Header.Set("Range", rangeHeader)
		}
		req = caddyhttp.PrepareRequest(req, caddy.NewReplacer(), w, &caddyhttp.Server{})
		if err := h.ServeHTTP(w, req, next); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return pw.log
	}
	for _, n := range sizes {
		for _, rng := range []string{"", "bytes=10-"} {
			for _, readFrom := range []bool{false, true} {
				path := fmt.Sprintf("/f%d.txt", n)
				want := serve(fileServer, path, rng, readFrom)
				for name, fl := range flashes {
					// Twice: the first request fills the cache.
					for round := range 2 {
						if got := serve(fl, path, rng, readFrom); !slices.Equal(got, want) {
							t.Errorf("%s %q, ReadFrom %v, engine %s, request %d: flash_serve %v, file_server %v",
								path, rng, readFrom, name, round+1, got, want)
						}
					}
				}
			}
		}
	}
}
