package flashserve

import (
	"net/http"
	"reflect"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// A handler after flash_serve's in the writer chain (encode, a plugin's
// wrapper) may answer differently depending on how the body is cut into
// writes: zstd, for one, ends a block at every flush of what it was
// given, so one write of a whole small file and file_server's way (a
// 512-byte sniff, then the rest through ReadFrom) give different bytes.
// Under such a writer the body is written the way file_server writes it
// (transmit.Transfer.FileServerWrites). On the server's own writer,
// nothing changes.

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
			// Caddy keeps these types unexported; a rename by a Caddy
			// upgrade sends their responses through the file_server
			// pattern (correct, slower), which TestServerWritersOnALiveServer
			// catches.
			switch reflect.TypeOf(w).String() {
			case "*caddyhttp.readDeadlineWriter", "*caddyhttp.responseRecorder", "*headers.responseWriterWrapper":
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
