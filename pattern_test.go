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

// TestServerWriterRecognisesWrappers checks which writers keep the
// engines' own writes (one write of a file in memory, sendfile) and which
// get file_server's pattern.
func TestServerWriterRecognisesWrappers(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "small.txt"), []byte(strings.Repeat("s", 1000)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	fsrv := &FlashServe{Root: root}
	if err := fsrv.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	defer fsrv.Cleanup()
	fsrv.logger = zap.NewNop()
	// A writer without Unwrap is the bottom of the chain: the server's.
	pw := &patternWriter{ResponseWriter: httptest.NewRecorder()}
	bare := struct{ http.ResponseWriter }{pw}
	req := caddyhttp.PrepareRequest(httptest.NewRequest("GET", "/small.txt", nil), caddy.NewReplacer(), bare, &caddyhttp.Server{})
	for range 2 {
		pw.log = nil
		if err := fsrv.ServeHTTP(bare, req, nil); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"write 1000"}; !slices.Equal(pw.log, want) {
		t.Errorf("on the server's writer, a file in memory went out as %v, want %v", pw.log, want)
	}
	idle := &caddyhttp.IdleTimeoutWriter{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: bare}}
	for _, tc := range []struct {
		name string
		w    http.ResponseWriter
		want bool
	}{
		{"bare", bare, true},
		{"write-idle wrapper", idle, true},
		{"access log recorder", caddyhttp.NewResponseRecorder(idle, nil, nil), true},
		{"foreign wrapper", &patternWriter{ResponseWriter: idle}, false},
		{"recorder over a foreign wrapper", caddyhttp.NewResponseRecorder(&patternWriter{ResponseWriter: idle}, nil, nil), false},
	} {
		if got := serverWriter(tc.w); got != tc.want {
			t.Errorf("%s: serverWriter %v, want %v", tc.name, got, tc.want)
		}
	}
}

func init() { caddy.RegisterModule(writerProbe{}) }

// writerProbe is a test handler that says in a header whether flash_serve
// would see its writer as the server's own.
type writerProbe struct{}

func (writerProbe) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.flash_serve_test_writer_probe", New: func() caddy.Module { return new(writerProbe) }}
}

func (writerProbe) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	w.Header().Set("X-Server-Writer", fmt.Sprint(serverWriter(w)))
	return next.ServeHTTP(w, r)
}

// TestServerWritersOnALiveServer checks serverWriter against the writers
// a running Caddy really hands to handlers, whose types Caddy keeps
// unexported (so a rename in a Caddy upgrade fails here): the server's
// own chain, with and without access logs, under a deferred header rule
// and under templates keep the engines' writes; encode does not.
func TestServerWritersOnALiveServer(t *testing.T) {
	ports := [2]int{freePort(t), freePort(t)}
	for ports[1] == ports[0] {
		ports[1] = freePort(t)
	}
	probe := `{"handler": "flash_serve_test_writer_probe"}`
	respond := `{"handler": "static_response", "body": "ok"}`
	route := func(path string, handlers ...string) string {
		return `{"match": [{"path": ["` + path + `"]}], "handle": [` + strings.Join(append(handlers, probe, respond), ", ") + `]}`
	}
	routes := strings.Join([]string{
		route("/plain"),
		route("/deferred", `{"handler": "headers", "response": {"deferred": true, "set": {"X-D": ["d"]}}}`),
		route("/templates", `{"handler": "templates"}`),
		route("/encode", `{"handler": "encode", "encodings": {"gzip": {}}}`),
		route("/encode-templates", `{"handler": "encode", "encodings": {"gzip": {}}}`, `{"handler": "templates"}`),
	}, ", ")
	server := func(port int, logs string) string {
		return fmt.Sprintf(`{"listen": ["127.0.0.1:%d"], "automatic_https": {"disable": true}, %s "routes": [%s]}`, port, logs, routes)
	}
	cfg := fmt.Sprintf(`{"admin": {"disabled": true}, "logging": {"logs": {"default": {"level": "ERROR"}}},
		"apps": {"http": {"servers": {"plain": %s, "logged": %s}}}}`, server(ports[0], ""), server(ports[1], `"logs": {},`))
	if err := caddy.Load([]byte(cfg), true); err != nil {
		t.Fatal(err)
	}
	defer caddy.Stop()
	c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer c.CloseIdleConnections()
	want := map[string]string{"/plain": "true", "/deferred": "true", "/templates": "true", "/encode": "false", "/encode-templates": "false"}
	for _, port := range ports {
		for path, w := range want {
			_, h, _ := get(t, c, fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
			if got := h.Get("X-Server-Writer"); got != w {
				t.Errorf("port %d, %s: serverWriter %q, want %s", port, path, got, w)
			}
		}
	}
}
