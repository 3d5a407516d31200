package flashserve

import (
	"net/http"
	"reflect"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap/zapcore"
)

// This file holds everything flash_serve reads of Caddy beyond its
// documented API: the types of the response writers Caddy's server puts
// under a handler (some unexported, matched by name), the name of the
// logger handler errors go to, and how routes, subroutes, named routes and
// error routes run. It was read against the Caddy in checkedCaddy:
// TestCaddyInternalsCheckedAgainstThisCaddy fails when go.mod requires
// another, and TestServerWritersOnALiveServer, TestQuietNotFound,
// TestPrewarmAtLoadWithRootDirective and TestPrewarmRootSetByInvokedRoute
// check the readings on a live server. Where a reading goes stale, the
// answer is the slower, correct one: file_server's write pattern, a 404
// through Caddy's error path, no prewarm of a root that is not settled.

// checkedCaddy is the Caddy version this file was last read against.
const checkedCaddy = "v2.11.9"

// Writers.
//
// A handler after flash_serve's in the writer chain (encode, a plugin's
// wrapper) may answer differently depending on how the body is cut into
// writes: zstd, for one, ends a block at every flush of what it was
// given, so one write of a whole small file and file_server's way (a
// 512-byte sniff, then the rest through ReadFrom) give different bytes.
// Under such a writer the body is written the way file_server writes it
// (transmit.Transfer.FileServerWrites). On the server's own writer,
// nothing changes.

// Caddy's unexported writer types, by the name reflect gives them.
const (
	readDeadlineWriter = "*caddyhttp.readDeadlineWriter"
	responseRecorder   = "*caddyhttp.responseRecorder"
	headerRuleWriter   = "*headers.responseWriterWrapper"
)

// serverWriter reports whether w hands what the handler writes to the
// connection unchanged: it is Caddy's server's own writer chain
// (net/http's writer, the write-idle and read-deadline wrappers, the
// access log's recorder), possibly under wrappers known to change headers
// only (a deferred `header` rule) or to take the whole body before they
// act on it (a recorder that buffers, as templates' does).
func serverWriter(w http.ResponseWriter) bool {
	for {
		switch w.(type) {
		case *caddyhttp.IdleTimeoutWriter:
		default:
			switch reflect.TypeOf(w).String() {
			case readDeadlineWriter, responseRecorder, headerRuleWriter:
			default:
				_, wrapper := w.(interface{ Unwrap() http.ResponseWriter })
				return !wrapper
			}
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return true
		}
		w = u.Unwrap()
	}
}

// netHTTPWriter reports whether w is net/http's own HTTP/1.x response
// writer (Caddy serves HTTP/2 with golang.org/x/net/http2 and HTTP/3 with
// quic-go, whose 404s take the error path), possibly inside the idle-timeout
// writers that Caddy's server puts around it before any handler runs: the
// server's error path writes its status through those same wrappers. Any
// other wrapper, including the access log's recorder (whose type intercept
// and templates also use), is a handler's or may be.
func netHTTPWriter(w http.ResponseWriter) bool {
	for {
		if _, ok := w.(*caddyhttp.IdleTimeoutWriter); !ok && reflect.TypeOf(w).String() != readDeadlineWriter {
			t := reflect.TypeOf(w)
			return t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "net/http"
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return false
		}
		w = u.Unwrap()
	}
}

// The error path.

// errorLogDebug reports whether Caddy's error log for the HTTP app
// ("http.log.error", the logger its servers write handler errors to) would
// write a DEBUG entry: then a 404 goes through Caddy, which logs it. The
// logger is built the way the HTTP app builds its own.
func errorLogDebug(ctx caddy.Context) bool {
	return ctx.Logger(caddyhttp.App{}).Named("log.error").Check(zapcore.DebugLevel, "") != nil
}

// routesReach reports whether target is one of the routes' handlers,
// directly or through subroutes without an error config. A handler found
// nowhere, only in named routes (whose invoke may sit inside such a
// subroute), or only inside something that is not a subroute (a handler
// of another kind holding routes of its own) is not: some code may look
// at its errors.
func routesReach(routes caddyhttp.RouteList, target caddyhttp.MiddlewareHandler, depth int) bool {
	if depth > 64 {
		return false // deeper than any config a person writes: do not guess
	}
	for _, route := range routes {
		for _, h := range route.Handlers {
			if h == target {
				return true
			}
			// Any error config, even an empty one, takes the error: an
			// empty list of error routes hands it to the next handler.
			if sub, ok := h.(*caddyhttp.Subroute); ok && sub.Errors == nil {
				if routesReach(sub.Routes, target, depth+1) {
					return true
				}
			}
		}
	}
	return false
}

// The site root for prewarm.
//
// Prewarm has to know the site root before any request arrives, but the
// usual Caddyfile sets it with a separate directive (`root * /srv`), which
// becomes a vars handler in a route before this handler's, invisible to
// Provision. Once the config runs, its routes are read to find the root
// that surely applies to every request reaching this handler.

// defaultRoot is the root of a handler configured without one: whatever
// the `root` directive put in the request's vars.
const defaultRoot = "{http.vars.root}"

// rootState is what a walk of the routes knows of the root at a point.
type rootState struct {
	root string
	// certain says every request that gets this far had root set to
	// exactly root ("" meaning no vars handler set it).
	certain bool
	// why says what made the root uncertain.
	why string
}

// routeWalk is what a walk of one server's routes reads besides them: the
// server's named routes, which `invoke` runs with the rest of the chain as
// their next, and how deep the walk is in them (a named route may invoke
// itself, under a matcher).
type routeWalk struct {
	named map[string]*caddyhttp.Route
	depth int
}

// Why a walk cannot settle a root it finds target under, unless those
// routes set it themselves before target.
const (
	errorRoutesWhy = "error routes see the root the failed request had"
	namedRouteWhy  = "the handler is in a named route, which each invoke runs with its own root"
)

// maxNamedDepth bounds the named routes a walk enters one in another.
const maxNamedDepth = 8

// routeRoot walks routes in the order Caddy runs them, looking for
// target. It returns whether target was found, and the root state that
// holds when target runs (or after the routes, if it was not found).
func (rw routeWalk) routeRoot(routes caddyhttp.RouteList, target caddyhttp.MiddlewareHandler, st rootState) (bool, rootState) {
	// groups of earlier routes that may or may not have set the root,
	// depending on their matchers.
	var maybe []string
	whenFound := func(group string, s rootState) (bool, rootState) {
		for _, g := range maybe {
			// A route of the same group that matched would have kept
			// target's route from running: its root does not apply.
			if g == "" || g != group {
				if s.certain {
					s.certain, s.why = false, "a root is set under a matcher this handler does not share"
				}
			}
		}
		return true, s
	}
	for _, rt := range routes {
		cur := st
		for _, h := range rt.Handlers {
			if h == target {
				return whenFound(rt.Group, cur)
			}
			switch v := h.(type) {
			case *caddyhttp.VarsMiddleware:
				raw, ok := (*v)["root"]
				if !ok {
					continue
				}
				// A vars handler on the way to target runs for every
				// request that reaches it: what it sets is the root.
				switch s, isString := raw.(string); {
				case !isString:
					cur = rootState{why: "the root is not a string"}
				case strings.Contains(s, "{"):
					cur = rootState{why: "the root has a placeholder"}
				default:
					cur = rootState{root: s, certain: true}
				}
			case *caddyhttp.Subroute:
				found, inner := rw.routeRoot(v.Routes, target, cur)
				if found {
					return whenFound(rt.Group, inner)
				}
				cur = inner
				if v.Errors != nil {
					// They end the chain: no root they set reaches a
					// later handler, but target may be one of them.
					if found, est := rw.routeRoot(v.Errors.Routes, target, rootState{why: errorRoutesWhy}); found {
						return true, est
					}
				}
			case *caddyhttp.Invoke:
				named, ok := rw.named[v.Name]
				if !ok {
					continue // answers an error at run time: nothing after it runs
				}
				if rw.depth >= maxNamedDepth {
					cur = rootState{why: "named routes invoke each other too deep to follow"}
					continue
				}
				inner := routeWalk{named: rw.named, depth: rw.depth + 1}
				found, st := inner.routeRoot(caddyhttp.RouteList{*named}, target, cur)
				if found {
					// Another invoke of the same named route may run it
					// with another root: only a root the named route
					// sets itself is settled.
					_, st = inner.routeRoot(caddyhttp.RouteList{*named}, target, rootState{why: namedRouteWhy})
					return true, st
				}
				cur = st
			}
		}
		if cur == st {
			continue
		}
		switch {
		case len(rt.MatcherSets) == 0:
			// Runs for every request that gets here; a root it sets for
			// sure replaces whatever earlier routes may have set.
			st = cur
			if cur.certain {
				maybe = nil
			}
		case rt.Terminal:
			// If it matched, nothing after it runs: its root never
			// reaches a later handler.
		default:
			maybe = append(maybe, rt.Group)
		}
	}
	if len(maybe) > 0 && st.certain {
		st.certain, st.why = false, "a root is set under a matcher this handler does not share"
	}
	return false, st
}

// appRoot finds target in the http app's servers and returns the root
// state when it runs.
func appRoot(app *caddyhttp.App, target caddyhttp.MiddlewareHandler) (bool, rootState) {
	for _, srv := range app.Servers {
		rw := routeWalk{named: srv.NamedRoutes}
		if found, st := rw.routeRoot(srv.Routes, target, rootState{certain: true}); found {
			return true, st
		}
		if srv.Errors != nil {
			// Error routes run after the main routes, whose root
			// depends on the request.
			start := rootState{why: errorRoutesWhy}
			if found, st := rw.routeRoot(srv.Errors.Routes, target, start); found {
				return true, st
			}
		}
		// A named route that no route invokes is still provisioned.
		for _, named := range srv.NamedRoutes {
			if found, st := rw.routeRoot(caddyhttp.RouteList{*named}, target, rootState{why: namedRouteWhy}); found {
				return true, st
			}
		}
	}
	return false, rootState{}
}
