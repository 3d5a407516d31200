package flashserve

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/flashserve/caddy-flash-serve/statacc"
)

// Micro-benchmarks of the per-request path: go test -bench . -benchmem

func BenchmarkParseRange(b *testing.B) {
	var buf [2]byteRange
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseRange("bytes=1048576-1114111", 1<<30, buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheckPreconditions(b *testing.B) {
	h := http.Header{"If-None-Match": {`"abc", "d877yjqtp7f9-p0"`}}
	v := validators{etag: `"d877yjqtp7f9-p0"`, modTime: time.Now()}
	b.ReportAllocs()
	for b.Loop() {
		checkPreconditions(h, "GET", v)
	}
}

// discardWriter is a ResponseWriter that keeps nothing. Its header map is
// cleared between requests, so that the benchmark counts the handler's
// allocations, not the map's.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }

// newBenchHandler provisions a FlashServe on a temporary root with one
// file of the given size.
func newBenchHandler(b *testing.B, size int) (*FlashServe, string) {
	b.Helper()
	root := b.TempDir()
	return newBenchHandlerOf(b, &FlashServe{Root: root}, root, size)
}

// newBenchHandlerOf provisions fsrv, which serves root, where it writes
// one file of the given size.
func newBenchHandlerOf(b *testing.B, fsrv *FlashServe, root string, size int) (*FlashServe, string) {
	b.Helper()
	if err := os.WriteFile(filepath.Join(root, "file.bin"), []byte(strings.Repeat("x", size)), 0o644); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	b.Cleanup(cancel)
	if err := fsrv.Provision(ctx); err != nil {
		b.Fatal(err)
	}
	if err := fsrv.Validate(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fsrv.Cleanup() })
	// Caddy's default logger, without a loaded config, logs at DEBUG; a
	// server's logs at INFO, which is what the benchmark must measure.
	fsrv.logger = zap.NewNop()
	return fsrv, "/file.bin"
}

func benchServe(b *testing.B, size int, header func(fsrv *FlashServe, path string) http.Header) {
	fsrv, path := newBenchHandler(b, size)
	benchServePath(b, fsrv, path, header, http.StatusOK, http.StatusPartialContent, http.StatusNotModified)
}

// benchSiteRoot provisions a handler as the Caddyfile `root * <dir>` and
// `flash_serve` lines do: its root is the `root` directive's variable,
// which benchServePath sets on each request as the vars handler does, and
// the Caddyfile is hidden.
func benchSiteRoot(b *testing.B, size int, path string, want int) {
	b.Helper()
	root := b.TempDir()
	fsrv := &FlashServe{Root: "{http.vars.root}", Hide: []string{filepath.Join(b.TempDir(), "Caddyfile")}}
	newBenchHandlerOf(b, fsrv, root, size)
	benchServeVars(b, fsrv, path, map[string]any{"root": root}, nil, want)
}

// benchServePath serves path over and over from a warm cache and checks
// that the last answer had one of the wanted statuses, whether written or
// returned as an error.
func benchServePath(b *testing.B, fsrv *FlashServe, path string, header func(fsrv *FlashServe, path string) http.Header, want ...int) {
	benchServeVars(b, fsrv, path, nil, header, want...)
}

// benchServeVars is benchServePath with vars set on the request, as the
// vars handler sets them.
func benchServeVars(b *testing.B, fsrv *FlashServe, path string, vars map[string]any, header func(fsrv *FlashServe, path string) http.Header, want ...int) {
	srv := &caddyhttp.Server{}
	req, _ := http.NewRequest("GET", "http://127.0.0.1"+path, nil)
	if header != nil {
		for k, v := range header(fsrv, path) {
			req.Header[k] = v
		}
	}
	w := &discardWriter{h: http.Header{}}
	repl := caddy.NewReplacer()
	req = caddyhttp.PrepareRequest(req, repl, w, srv)
	for k, v := range vars {
		caddyhttp.SetVar(req.Context(), k, v)
	}
	next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })
	serve := func() int {
		w.status = 0
		err := fsrv.ServeHTTP(w, req, next)
		// A type assertion, not errors.As, which would allocate.
		if he, ok := err.(caddyhttp.HandlerError); ok {
			return he.StatusCode
		}
		if err != nil {
			b.Fatal(err)
		}
		return w.status
	}
	// Warm the cache: the benchmark measures hits.
	serve()
	b.ReportAllocs()
	status := 0
	for b.Loop() {
		clear(w.h)
		status = serve()
	}
	if !slices.Contains(want, status) {
		b.Fatalf("status %d, want one of %v", status, want)
	}
}

// BenchmarkServeHit1KiB is the whole handler on a cache hit, lookup,
// decision and a 1 KiB body from memory.
func BenchmarkServeHit1KiB(b *testing.B) { benchServe(b, 1024, nil) }

// BenchmarkServeHit1KiBSiteRoot is BenchmarkServeHit1KiB configured as
// a Caddyfile site is (benchSiteRoot): workload a's handler.
func BenchmarkServeHit1KiBSiteRoot(b *testing.B) { benchSiteRoot(b, 1024, "/file.bin", http.StatusOK) }

// BenchmarkServeMissSiteRoot is BenchmarkServeMiss configured as a
// Caddyfile site is (benchSiteRoot): workload g's handler.
func BenchmarkServeMissSiteRoot(b *testing.B) {
	benchSiteRoot(b, 16, "/missing.bin", http.StatusNotFound)
}

// BenchmarkServeHitRange is a hit with a Range header.
func BenchmarkServeHitRange(b *testing.B) {
	benchServe(b, 1<<20, func(*FlashServe, string) http.Header {
		return http.Header{"Range": {"bytes=65536-131071"}}
	})
}

// BenchmarkServeMiss is a 404 from the negative cache, with no error
// routes.
func BenchmarkServeMiss(b *testing.B) {
	fsrv, _ := newBenchHandler(b, 16)
	benchServePath(b, fsrv, "/missing.bin", nil, http.StatusNotFound)
}

// BenchmarkServeHitNotModified is a revalidation that ends in 304.
func BenchmarkServeHitNotModified(b *testing.B) {
	benchServe(b, 1024, func(fsrv *FlashServe, path string) http.Header {
		e, err := fsrv.cache.GetCounted(context.Background(), nil, "", statacc.SymlinksFollow, filepath.Join(fsrv.Root, strings.TrimPrefix(path, "/")))
		if err != nil {
			b.Fatal(err)
		}
		defer e.Release()
		return http.Header{"If-None-Match": {e.ETag()}}
	})
}
