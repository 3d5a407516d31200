//go:build linux && !flashserve_portable

package transmit

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/pires/go-proxyproto"
)

// memoryBody is a file with its content kept in memory, as statacc keeps
// a small file's.
type memoryBody struct {
	fileBody
	data []byte
}

func (b memoryBody) Data() []byte { return b.data }

// TestMemoryBodyLeavesFromMemoryUnderEveryPolicy: a body kept in memory is
// sent from memory under every policy, with its descriptor open or not:
// one file's bodies never switch between the copy and the file, which a
// write through a shared mapping changes with no event.
func TestMemoryBodyLeavesFromMemoryUnderEveryPolicy(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.css")
	if err := os.WriteFile(p, []byte("body"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := ringSender(t)
	for _, policy := range []string{PolicyAuto, PolicySendfile, PolicyCopy, PolicyIOUring} {
		s.Policy = policy
		r := httptest.NewRequest("GET", "/a.css", nil)
		if got := s.Choose(httptest.NewRecorder(), r, memoryBody{fileBody{f}, []byte("body")}).Engine; got != EngineMemory {
			t.Errorf("transmit %s: a body kept in memory leaves by %v", policy, got)
		}
		if got := s.Choose(httptest.NewRecorder(), r, fileBody{f}).Engine; got == EngineMemory {
			t.Errorf("transmit %s: a body not kept in memory leaves by %v", policy, got)
		}
	}
}

// readFromRecorder is a response writer with ReadFrom, as Caddy's and
// net/http's HTTP/1 writers are.
type readFromRecorder struct{ *httptest.ResponseRecorder }

func (w readFromRecorder) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(w.ResponseRecorder, r)
}

// TestCleartextBodyWithoutTheWrapperIsCopiedHere: on a server without the
// listener wrapper, nothing below the writers can sendfile a flash_serve
// body (net/http's connection knows *os.File only and would copy it
// through a buffer it allocates per body), so a cleartext HTTP/1 body is
// copied by the copy engine and the handler is told once per request to
// say why. On a server with the wrapper, whether or not the connection is
// the wrapper's (TLS passes through, and a wrapper listed after it may
// hand ReadFrom down to it), the body is handed down for sendfile.
func TestCleartextBodyWithoutTheWrapperIsCopiedHere(t *testing.T) {
	f, _ := testFile(t, 64<<10)
	var told int
	s := &Sender{Policy: PolicyAuto, Copied: func(*http.Request) { told++ }}
	for _, tc := range []struct {
		name string
		ctx  func(context.Context) context.Context
		want Engine
		told int
	}{
		{"no wrapper on the server", func(ctx context.Context) context.Context { return ctx }, EngineCopy, 1},
		{"the wrapper's connection", func(ctx context.Context) context.Context { return withConn(ctx, &conn{}) }, EngineSendfile, 0},
		{"a connection the wrapper did not make", func(ctx context.Context) context.Context { return withConn(ctx, nil) }, EngineSendfile, 0},
		{"the wrapper's connection under another wrapper's", func(ctx context.Context) context.Context {
			return withConn(ctx, rawConn{&conn{}})
		}, EngineSendfile, 0},
	} {
		told = 0
		r := httptest.NewRequest("GET", "/data", nil)
		r = r.WithContext(tc.ctx(r.Context()))
		if got := s.Choose(readFromRecorder{httptest.NewRecorder()}, r, fileBody{f}).Engine; got != tc.want || told != tc.told {
			t.Errorf("%s: the body leaves by %v, the handler told %d times; want %v and %d", tc.name, got, told, tc.want, tc.told)
		}
	}
}

// rawConn is a connection of a listener wrapper listed after flash_serve's
// (proxy_protocol's), which gives the one it wraps with Raw.
type rawConn struct{ net.Conn }

func (c rawConn) Raw() net.Conn { return c.Conn }

// selfRaw is a connection whose Raw gives itself back.
type selfRaw struct{ net.Conn }

func (c selfRaw) Raw() net.Conn { return c }

// TestWrapperConnectionFoundUnderAnotherWrapper: a wrapper listed after
// flash_serve's wraps its connection in its own (proxy_protocol, which
// passes writes and ReadFrom on); the request's context still holds the
// flash_serve connection, so that its writes are gathered.
func TestWrapperConnectionFoundUnderAnotherWrapper(t *testing.T) {
	inner := &conn{}
	r := httptest.NewRequest("GET", "/data", nil)
	r = r.WithContext(withConn(r.Context(), rawConn{rawConn{inner}}))
	if got := holdHead(r); got != inner {
		t.Fatalf("holdHead found %p under two wrappers' connections, want the wrapper's %p", got, inner)
	}
	inner.armed.Store(false)
	// proxy_protocol's own connection, as Caddy's proxy_protocol wrapper
	// makes it.
	r = httptest.NewRequest("GET", "/data", nil)
	r = r.WithContext(withConn(r.Context(), proxyproto.NewConn(inner)))
	if got := holdHead(r); got != inner {
		t.Fatalf("holdHead found %p under proxy_protocol's connection, want the wrapper's %p", got, inner)
	}
	inner.armed.Store(false)
	// A Raw that gives its own connection back ends the search.
	r = httptest.NewRequest("GET", "/data", nil)
	r = r.WithContext(withConn(r.Context(), selfRaw{}))
	if got := holdHead(r); got != nil || noWrapper(r) {
		t.Fatalf("over a connection whose Raw is itself: holdHead %p, no wrapper %v; want nil and false", got, noWrapper(r))
	}
	r = httptest.NewRequest("GET", "/data", nil)
	r = r.WithContext(withConn(r.Context(), rawConn{nil}))
	if got := holdHead(r); got != nil || noWrapper(r) {
		t.Fatalf("over a connection that is not the wrapper's: holdHead %p, no wrapper %v; want nil and false", got, noWrapper(r))
	}
}
