package flashserve

import (
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

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
			found, st := routeRoot(tc.routes, target, rootState{certain: true})
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
