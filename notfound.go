package flashserve

import (
	"net/http"
	"reflect"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap/zapcore"
)

// A 404 is returned to Caddy as an error, as file_server returns it. Caddy's
// server then logs it at DEBUG, runs the error routes that apply (the
// server's handle_errors, or those of a subroute), and writes the status
// below every handler's response writer, so that `header` rules deferred
// to the response, `encode`, `intercept` and the metrics never see it. That
// error path costs about as much as the rest of the request (a zap logger
// clone, the error's log fields, a copy of the request: BenchmarkSite404).
//
// When nothing can tell the two apart, the handler writes the 404 itself,
// as `respond 404` does: same status, same headers (the ones already set,
// nothing added), same empty body. quietNotFound says when that is.

// errorLogDebug reports whether Caddy's error log for the HTTP app
// ("http.log.error", the logger its servers write handler errors to) would
// write a DEBUG entry: then a 404 goes through Caddy, which logs it. The
// logger is built the way the HTTP app builds its own.
func errorLogDebug(ctx caddy.Context) bool {
	return ctx.Logger(caddyhttp.App{}).Named("log.error").Check(zapcore.DebugLevel, "") != nil
}

// quietNotFound reports whether a 404 may be written here instead of being
// returned: only where Caddy's error path would do nothing but write the
// status on the same writer. That is when
//   - the error log would not log it (errorLogDebug, computed at Provision),
//   - the request is not being served by error routes (there a failing
//     handler's error is reported with the first error's status),
//   - w is net/http's own response writer: no handler wraps it (encode,
//     header rules deferred to the response, intercept, templates, the
//     metrics' recorder, the access log's recorder), so nothing between
//     the server and this handler could see a written status differently
//     from one the server writes,
//   - the server has no error routes, no access logs (their per-host
//     loggers also get the error) and no per-server metrics,
//   - and every subroute on the way from the server to this handler has no
//     error config of its own (routesReach).
func (fsrv *FlashServe) quietNotFound(w http.ResponseWriter, r *http.Request) bool {
	if fsrv.errorLogDebug || !netHTTPWriter(w) {
		return false
	}
	if _, inErrorRoute := r.Context().Value(caddyhttp.ErrorCtxKey).(error); inErrorRoute {
		return false
	}
	srv, _ := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if srv == nil || srv.Logs != nil || srv.Metrics != nil || srv.Errors != nil && len(srv.Errors.Routes) > 0 {
		return false
	}
	if q := fsrv.quiet.Load(); q != nil && q.srv == srv {
		return q.ok
	}
	// Once per handler and server: routes do not change after Provision.
	q := &quietIn{srv: srv, ok: fsrv.reachedWithoutErrorRoutes(srv)}
	fsrv.quiet.Store(q)
	return q.ok
}

// quietIn caches quietNotFound's walk of one server's routes.
type quietIn struct {
	srv *caddyhttp.Server
	ok  bool
}

// reachedWithoutErrorRoutes reports whether this handler is found in the
// server's routes through subroutes none of which has an error config. A
// handler found nowhere, only in named routes (whose invoke may sit inside
// such a subroute), or only inside something that is not a subroute (a
// handler of another kind holding routes of its own) is not: some code may
// look at its errors.
func (fsrv *FlashServe) reachedWithoutErrorRoutes(srv *caddyhttp.Server) bool {
	return routesReach(srv.Routes, fsrv, 0)
}

// routesReach reports whether target is one of the routes' handlers,
// directly or through subroutes without an error config.
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

// netHTTPWriter reports whether w is net/http's own HTTP/1.x response
// writer (Caddy serves HTTP/2 with golang.org/x/net/http2 and HTTP/3 with
// quic-go, whose 404s take the error path), possibly inside the idle-timeout
// writers that Caddy's server puts around it before any handler runs: the
// server's error path writes its status through those same wrappers. Any
// other wrapper, including the access log's recorder (whose type intercept
// and templates also use), is a handler's or may be.
func netHTTPWriter(w http.ResponseWriter) bool {
	for {
		if _, ok := w.(*caddyhttp.IdleTimeoutWriter); !ok && reflect.TypeOf(w).String() != "*caddyhttp.readDeadlineWriter" {
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
