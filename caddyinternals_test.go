package flashserve

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

// TestCaddyInternalsCheckedAgainstThisCaddy fails when go.mod requires
// another Caddy than the one caddyinternals.go was read against: re-read what that file takes from Caddy in the new version
// (the writer types, the error logger's name, how routes run), run the
// tests that follow, and update checkedCaddy.
func TestCaddyInternalsCheckedAgainstThisCaddy(t *testing.T) {
	// A test binary's build information lists no dependencies: go.mod
	// says which Caddy the package is built with.
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(mod)) {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "require" {
			f = f[1:]
		}
		if len(f) >= 2 && f[0] == "github.com/caddyserver/caddy/v2" {
			if f[1] != checkedCaddy {
				t.Fatalf("go.mod requires Caddy %s; caddyinternals.go was checked against %s", f[1], checkedCaddy)
			}
			return
		}
	}
	t.Fatal("go.mod does not require Caddy")
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

// TestRoutesReach checks the walk that decides whether a subroute's error
// routes could see this handler's errors.
func TestRoutesReach(t *testing.T) {
	target := new(FlashServe)
	other := new(FlashServe)
	withErrors := &caddyhttp.HTTPErrorConfig{Routes: caddyhttp.RouteList{{}}}
	route := func(hs ...caddyhttp.MiddlewareHandler) caddyhttp.Route { return caddyhttp.Route{Handlers: hs} }
	sub := func(errs *caddyhttp.HTTPErrorConfig, hs ...caddyhttp.MiddlewareHandler) *caddyhttp.Subroute {
		return &caddyhttp.Subroute{Routes: caddyhttp.RouteList{route(hs...)}, Errors: errs}
	}
	for _, tc := range []struct {
		name   string
		routes caddyhttp.RouteList
		want   bool
	}{
		{"directly", caddyhttp.RouteList{route(other), route(target)}, true},
		{"in nested subroutes without errors", caddyhttp.RouteList{route(sub(nil, sub(nil, target)))}, true},
		{"in a subroute with an empty error config", caddyhttp.RouteList{route(sub(&caddyhttp.HTTPErrorConfig{}, target))}, false},
		{"in a subroute with error routes", caddyhttp.RouteList{route(sub(withErrors, target))}, false},
		{"below a subroute with error routes", caddyhttp.RouteList{route(sub(withErrors, sub(nil, target)))}, false},
		{"not there", caddyhttp.RouteList{route(other, sub(nil, other))}, false},
	} {
		if got := routesReach(tc.routes, target, 0); got != tc.want {
			t.Errorf("%s: routesReach = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRouteRoot checks which roots the route walk takes as settled for
// every request that reaches the handler, in the shapes the Caddyfile
// adapter gives `root` and `flash_serve`.
func TestRouteRoot(t *testing.T) {
	target := &FlashServe{}
	other := &FlashServe{}
	vars := func(root any) caddyhttp.MiddlewareHandler {
		v := caddyhttp.VarsMiddleware{"root": root}
		return &v
	}
	sub := func(routes ...caddyhttp.Route) caddyhttp.MiddlewareHandler {
		return &caddyhttp.Subroute{Routes: routes}
	}
	always := func(hs ...caddyhttp.MiddlewareHandler) caddyhttp.Route { return caddyhttp.Route{Handlers: hs} }
	matched := func(group string, terminal bool, hs ...caddyhttp.MiddlewareHandler) caddyhttp.Route {
		return caddyhttp.Route{Group: group, Terminal: terminal, MatcherSets: caddyhttp.MatcherSets{{}}, Handlers: hs}
	}
	for _, tc := range []struct {
		name    string
		routes  caddyhttp.RouteList
		found   bool
		certain bool
		root    string
	}{
		{"root * then the handler", caddyhttp.RouteList{always(vars("/srv")), always(target)}, true, true, "/srv"},
		{"same route, before", caddyhttp.RouteList{always(vars("/srv"), target)}, true, true, "/srv"},
		{"same route, after", caddyhttp.RouteList{always(target, vars("/srv"))}, true, true, ""},
		{"no root at all", caddyhttp.RouteList{always(target)}, true, true, ""},
		{"site route with host matcher and subroute",
			caddyhttp.RouteList{matched("", true, sub(always(vars("/srv")), always(target)))}, true, true, "/srv"},
		{"root inside handle",
			caddyhttp.RouteList{matched("group0", false, sub(always(vars("/static")), always(target)))}, true, true, "/static"},
		{"root under a matcher the handler does not share",
			caddyhttp.RouteList{matched("", false, vars("/a")), always(target)}, true, false, ""},
		{"an earlier handle of the same group",
			caddyhttp.RouteList{matched("g", false, sub(always(vars("/a")))), matched("g", false, sub(always(target)))}, true, true, ""},
		{"an earlier handle of another group",
			caddyhttp.RouteList{matched("g", false, sub(always(vars("/a")))), matched("h", false, sub(always(target)))}, true, false, ""},
		{"another site's terminal route",
			caddyhttp.RouteList{matched("", true, sub(always(vars("/other")), always(other))), matched("", true, sub(always(vars("/srv")), always(target)))}, true, true, "/srv"},
		{"a root set for sure after a conditional one",
			caddyhttp.RouteList{matched("", false, vars("/a")), always(vars("/b")), always(target)}, true, true, "/b"},
		{"a conditional root inside an earlier subroute",
			caddyhttp.RouteList{always(sub(matched("", false, vars("/a")))), always(target)}, true, false, ""},
		{"a placeholder", caddyhttp.RouteList{always(vars("/srv/{http.request.host}")), always(target)}, true, false, ""},
		{"not a string", caddyhttp.RouteList{always(vars(42)), always(target)}, true, false, ""},
		{"not there", caddyhttp.RouteList{always(vars("/srv"), other)}, false, true, "/srv"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			found, st := routeWalk{}.routeRoot(tc.routes, target, rootState{certain: true})
			if found != tc.found || st.certain != tc.certain || tc.certain && st.root != tc.root {
				t.Fatalf("found %v, state %+v; want found %v, certain %v, root %q", found, st, tc.found, tc.certain, tc.root)
			}
			if !st.certain && st.why == "" {
				t.Fatal("an uncertain root must say why")
			}
		})
	}
}

// TestRouteRootNamedAndErrorRoutes: a named route that `invoke` runs
// before the handler can set the root (Caddy compiles it with the rest of
// the chain as its next), and a handler inside a named route, or inside a
// subroute's own error routes, is found, with a root that the walk cannot
// settle, rather than never found (which would keep prewarm polling).
func TestRouteRootNamedAndErrorRoutes(t *testing.T) {
	target := &FlashServe{}
	vars := func(root any) caddyhttp.MiddlewareHandler {
		v := caddyhttp.VarsMiddleware{"root": root}
		return &v
	}
	always := func(hs ...caddyhttp.MiddlewareHandler) caddyhttp.Route { return caddyhttp.Route{Handlers: hs} }
	invoke := func(name string) caddyhttp.MiddlewareHandler { return &caddyhttp.Invoke{Name: name} }
	setOther := always(vars("/other"))
	for _, tc := range []struct {
		name    string
		srv     *caddyhttp.Server
		certain bool
		root    string
	}{
		{"a named route sets the root before the handler", &caddyhttp.Server{
			Routes:      caddyhttp.RouteList{always(vars("/srv")), always(invoke("setroot")), always(target)},
			NamedRoutes: map[string]*caddyhttp.Route{"setroot": &setOther},
		}, true, "/other"},
		{"a named route that sets no root", &caddyhttp.Server{
			Routes:      caddyhttp.RouteList{always(vars("/srv")), always(invoke("none")), always(target)},
			NamedRoutes: map[string]*caddyhttp.Route{"none": {Handlers: []caddyhttp.MiddlewareHandler{&caddyhttp.StaticResponse{}}}},
		}, true, "/srv"},
		{"the handler in a named route", &caddyhttp.Server{
			Routes:      caddyhttp.RouteList{always(vars("/srv")), always(invoke("serve"))},
			NamedRoutes: map[string]*caddyhttp.Route{"serve": {Handlers: []caddyhttp.MiddlewareHandler{target}}},
		}, false, ""},
		{"the handler in a subroute's error routes", &caddyhttp.Server{
			Routes: caddyhttp.RouteList{always(vars("/srv"), &caddyhttp.Subroute{
				Routes: caddyhttp.RouteList{always(&caddyhttp.StaticResponse{})},
				Errors: &caddyhttp.HTTPErrorConfig{Routes: caddyhttp.RouteList{always(target)}},
			})},
		}, false, ""},
		{"a named route that sets its own root", &caddyhttp.Server{
			Routes:      caddyhttp.RouteList{always(vars("/srv")), always(invoke("static"))},
			NamedRoutes: map[string]*caddyhttp.Route{"static": {Handlers: []caddyhttp.MiddlewareHandler{vars("/static"), target}}},
		}, true, "/static"},
		{"error routes of a subroute that set their own root", &caddyhttp.Server{
			Routes: caddyhttp.RouteList{always(&caddyhttp.Subroute{
				Errors: &caddyhttp.HTTPErrorConfig{Routes: caddyhttp.RouteList{always(vars("/errors"), target)}},
			})},
		}, true, "/errors"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := &caddyhttp.App{Servers: map[string]*caddyhttp.Server{"srv0": tc.srv}}
			found, st := appRoot(app, target)
			if !found || st.certain != tc.certain || tc.certain && st.root != tc.root {
				t.Fatalf("found %v, state %+v; want found, certain %v, root %q", found, st, tc.certain, tc.root)
			}
			if !st.certain && st.why == "" {
				t.Fatal("an uncertain root must say why")
			}
		})
	}
}
