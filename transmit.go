package flashserve

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/flashserve/caddy-flash-serve/statacc"
	"github.com/flashserve/caddy-flash-serve/transmit"
)

// provisionSender sets up how the handler's bodies leave, with the
// process's io_uring where the policy may use it.
func (fsrv *FlashServe) provisionSender(workers int) {
	fsrv.sender = transmit.Sender{
		Policy:           fsrv.Transmit,
		SendfileMaxChunk: fsrv.sendfileMaxChunk,
		Copied:           fsrv.noZeroCopy,
	}
	fsrv.sender.Open(workers, fsrv.logger)
}

// writeResponse writes the status line, the headers that decide set, and
// the body bytes.
func (fsrv *FlashServe) writeResponse(w http.ResponseWriter, r *http.Request, res *resolved, p *plan) error {
	w.WriteHeader(p.status)
	if p.errorText != "" {
		// Written for HEAD too, as http.Error does, so that net/http derives
		// the same Content-Length.
		io.WriteString(w, p.errorText)
		return nil
	}
	if p.noBody || r.Method == http.MethodHead {
		return nil
	}
	t := transfer{Transfer: fsrv.sender.Choose(w, r, res.body), body: res.body}
	t.FileServerWrites = !serverWriter(w)
	t.ContentLength = p.length // what decide put in the header
	// Counted after the body, by the engine that really sent it.
	defer func() { counters.requests[t.Engine].Add(1) }()
	if fsrv.LimitRate != nil && fsrv.LimitRate.Rate > 0 {
		t.pace = &pacer{rate: fsrv.LimitRate.Rate, after: fsrv.LimitRate.After, ctx: r.Context()}
	} else {
		// The headers and a copied body leave in one write, every part of
		// a multipart body with them (not across limit_rate's waits).
		g := transmit.Gather(w, r, &t.Transfer, p.length)
		defer g.Release()
	}
	var err error
	switch {
	case p.boundary != "":
		err = fsrv.sendMultipart(w, r, res, p, &t)
	case p.ranges != nil:
		err = fsrv.sendRange(w, r, &t, p.ranges[0].start, p.ranges[0].length)
	default:
		err = fsrv.sendRange(w, r, &t, 0, p.length)
	}
	if err == nil {
		return nil
	}
	var re *transmit.ReadError
	if errors.As(err, &re) {
		// The headers promised bytes that can no longer be read. Padding or
		// sending other bytes would corrupt the client's copy without its
		// knowing; cutting the connection tells it the body is incomplete.
		fsrv.logger.Error("aborting response: file read failed mid-body",
			zap.String("filename", res.body.Path()), zap.Error(err))
		panic(http.ErrAbortHandler)
	}
	// The client went away; there is nobody left to answer.
	fsrv.logger.Debug("client write failed", zap.String("filename", res.body.Path()), zap.Error(err))
	return nil
}

// transfer is one response body on its way out.
type transfer struct {
	transmit.Transfer
	body *statacc.Entry
	pace *pacer // nil without limit_rate
}

// sendMultipart writes a multipart/byteranges body.
func (fsrv *FlashServe) sendMultipart(w http.ResponseWriter, r *http.Request, res *resolved, p *plan, t *transfer) error {
	var hdr [256]byte
	for i, rg := range p.ranges {
		if _, err := w.Write(appendPartHeader(hdr[:0], i, rg, p.boundary, p.partType, res.body.Size())); err != nil {
			return err
		}
		if err := fsrv.sendRange(w, r, t, rg.start, rg.length); err != nil {
			return err
		}
	}
	_, err := w.Write(appendMultipartEnd(hdr[:0], p.boundary))
	return err
}

// sendRange sends length bytes of the body from offset start with the
// transfer's engine, in paced chunks under limit_rate.
func (fsrv *FlashServe) sendRange(w http.ResponseWriter, r *http.Request, t *transfer, start, length int64) error {
	if t.pace == nil {
		return fsrv.sendChunk(w, r, t, start, length)
	}
	for length > 0 {
		n := t.pace.next(length)
		if err := t.pace.wait(); err != nil {
			return err
		}
		if err := fsrv.sendChunk(w, r, t, start, n); err != nil {
			return err
		}
		t.pace.sent += n
		start += n
		length -= n
	}
	return nil
}

// sendChunk has one run of body bytes sent and counts them by the engine
// that sent them.
func (fsrv *FlashServe) sendChunk(w http.ResponseWriter, r *http.Request, t *transfer, start, length int64) error {
	sent, err := fsrv.sender.Send(w, r, t.body, &t.Transfer, start, length)
	for e, n := range sent {
		if n != 0 {
			counters.bytes[e].Add(n)
		}
	}
	return err
}

// noZeroCopy logs, once per handler, that a cleartext HTTP/1 body was
// copied instead of sent with sendfile, and what to change.
func (fsrv *FlashServe) noZeroCopy(r *http.Request) {
	fsrv.warnOnce.Do(func() {
		if !serverHasWrapper(r) {
			fsrv.logger.Warn("cleartext HTTP/1 responses are copied, not sent with sendfile, "+
				"because this server has no flash_serve listener wrapper",
				zap.String("fix", "list flash_serve in listener_wrappers of the global servers option "+
					"(README: A first Caddyfile)"),
				zap.String("server_json_field", `"listener_wrappers": [{"wrapper": "flash_serve"}]`))
			return
		}
		fsrv.logger.Warn("cleartext HTTP/1 responses are copied although the flash_serve listener wrapper is configured",
			zap.String("cause", "a handler in front (encode), a listener wrapper listed before it (proxy_protocol), or "+
				"protocols without h2 (Caddy then wraps every connection) hide the connection"),
			zap.String("fix", "list flash_serve first in listener_wrappers"))
	})
}

// serverHasWrapper reports whether the request's server lists the
// flash_serve listener wrapper.
func serverHasWrapper(r *http.Request) bool {
	srv, ok := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !ok {
		return false
	}
	for _, raw := range srv.ListenerWrappersRaw {
		if containsWrapperName(raw) {
			return true
		}
	}
	return false
}

func containsWrapperName(raw []byte) bool {
	var w struct {
		Wrapper string `json:"wrapper"`
	}
	return json.Unmarshal(raw, &w) == nil && w.Wrapper == "flash_serve"
}
