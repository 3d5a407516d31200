package flashserve

import (
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
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
	q := &quietIn{srv: srv, ok: routesReach(srv.Routes, fsrv, 0)}
	fsrv.quiet.Store(q)
	return q.ok
}

// quietIn caches quietNotFound's walk of one server's routes.
type quietIn struct {
	srv *caddyhttp.Server
	ok  bool
}
