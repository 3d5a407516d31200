package flashserve

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"sync"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/flashserve/caddy-flash-serve/transmit"
)

// Transmission engines, the values of the transmit option.
const (
	engineAuto     = "auto"
	engineSendfile = "sendfile"
	engineCopy     = "copy"
	engineIOUring  = "io_uring"
)

// transmit writes the status line, the headers that decide set, and the
// body bytes.
func (fsrv *FlashServe) transmit(w http.ResponseWriter, r *http.Request, res *resolved, p *plan) error {
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
	var err error
	switch {
	case p.boundary != "":
		err = fsrv.sendMultipart(w, r, res, p)
	case p.ranges != nil:
		err = fsrv.sendRange(w, r, res, p.ranges[0].start, p.ranges[0].length)
	default:
		err = fsrv.sendRange(w, r, res, 0, p.length)
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
			zap.String("filename", res.body.Path), zap.Error(err))
		panic(http.ErrAbortHandler)
	}
	// The client went away; there is nobody left to answer.
	fsrv.logger.Debug("client write failed", zap.String("filename", res.body.Path), zap.Error(err))
	return nil
}

// sendMultipart writes a multipart/byteranges body.
func (fsrv *FlashServe) sendMultipart(w http.ResponseWriter, r *http.Request, res *resolved, p *plan) error {
	var hdr [256]byte
	for i, rg := range p.ranges {
		if _, err := w.Write(appendPartHeader(hdr[:0], i, rg, p.boundary, p.partType, res.body.Size)); err != nil {
			return err
		}
		if err := fsrv.sendRange(w, r, res, rg.start, rg.length); err != nil {
			return err
		}
	}
	_, err := w.Write(appendMultipartEnd(hdr[:0], p.boundary))
	return err
}

// sendRange sends length bytes of the body from offset start with the
// engine the policy picks:
//   - memory: a small file kept in memory, one Write (with the headers,
//     which net/http still holds in its buffer);
//   - sendfile: cleartext HTTP/1.x through the flash_serve listener wrapper;
//   - copy: pread into pooled buffers, for TLS, HTTP/2, HTTP/3 and encode.
func (fsrv *FlashServe) sendRange(w http.ResponseWriter, r *http.Request, res *resolved, start, length int64) error {
	body := res.body
	if body.Data != nil && fsrv.engine == engineAuto {
		_, err := w.Write(body.Data[start : start+length])
		return err
	}
	file, fd := res.bodyFile()
	if fsrv.engine != engineCopy && r.ProtoMajor == 1 && r.TLS == nil && fd >= 0 {
		if rf, ok := w.(io.ReaderFrom); ok {
			return fsrv.sendFile(rf, w, r, file, fd, start, length)
		}
	}
	var err error
	if r.ProtoMajor >= 2 {
		_, err = transmit.CopySmall(w, file, start, length)
	} else {
		_, err = transmit.Copy(w, file, start, length)
	}
	return err
}

var sourcePool = sync.Pool{New: func() any { return new(transmit.FileSource) }}

// sendFile hands the body down the writer chain as a *transmit.FileSource,
// which the listener wrapper's connection sends with sendfile.
func (fsrv *FlashServe) sendFile(rf io.ReaderFrom, w http.ResponseWriter, r *http.Request, file *os.File, fd int, start, length int64) error {
	src := sourcePool.Get().(*transmit.FileSource)
	*src = transmit.FileSource{File: file, FD: fd, Off: start, N: length}
	defer func() {
		*src = transmit.FileSource{}
		sourcePool.Put(src)
	}()
	if restore := widenWriteChunk(w, fsrv.sendfileMaxChunk); restore != nil {
		defer restore()
	}
	n, err := rf.ReadFrom(src)
	if err == nil && n != length {
		err = &transmit.ReadError{Offset: start + n, Err: transmit.ErrTruncated}
	}
	if !src.ZeroCopy && length > sniffLen {
		fsrv.noZeroCopy(r)
	}
	return err
}

// sniffLen is what net/http copies through its own buffer before it hands
// a ReadFrom to the connection.
const sniffLen = 512

// widenWriteChunk raises Caddy's write chunk (64 KiB by default, see
// write_idle) to the sendfile chunk for this response, so that one
// sendfile call can send up to that much, as nginx's sendfile_max_chunk
// does. The write-idle deadline still covers every chunk.
func widenWriteChunk(w http.ResponseWriter, chunk int) (restore func()) {
	for {
		if itw, ok := w.(*caddyhttp.IdleTimeoutWriter); ok {
			if itw.MaxChunk >= chunk {
				return nil
			}
			return itw.Override(itw.Deadline.Timeout, itw.Deadline.MinRate, chunk)
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
}

// noZeroCopy logs, once per handler, that a cleartext HTTP/1 body was
// copied instead of sent with sendfile, and what to change.
func (fsrv *FlashServe) noZeroCopy(r *http.Request) {
	fsrv.warnOnce.Do(func() {
		if !serverHasWrapper(r) {
			fsrv.logger.Warn("cleartext HTTP/1 responses are copied, not sent with sendfile, "+
				"because this server has no flash_serve listener wrapper; add to the global options:\n"+
				"\tservers {\n\t\tlistener_wrappers {\n\t\t\tflash_serve\n\t\t}\n\t}",
				zap.String("server_json_field", `"listener_wrappers": [{"wrapper": "flash_serve"}]`))
			return
		}
		fsrv.logger.Warn("cleartext HTTP/1 responses are copied although the flash_serve listener wrapper is " +
			"configured: a handler in front (encode) or a listener wrapper after it (proxy_protocol), or " +
			"protocols without h2 (Caddy then wraps every connection), hide the connection; list flash_serve last")
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
