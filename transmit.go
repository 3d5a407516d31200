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

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
	"github.com/flashserve/caddy-flash-serve/statacc"
	"github.com/flashserve/caddy-flash-serve/transmit"
)

// Transmission engines, the values of the transmit option.
const (
	engineAuto     = "auto"
	engineSendfile = "sendfile"
	engineCopy     = "copy"
	engineIOUring  = "io_uring"
)

// engine names a way bodies leave, for the policy and the metrics.
type engine uint8

const (
	engMemory engine = iota
	engSendfile
	engIOUring
	engCopy
	numEngines
)

var engineNames = [numEngines]string{"memory", "sendfile", "io_uring", "copy"}

// pickEngine applies the transmit policy to one response:
//   - memory: a small file kept in memory, one Write (with the headers,
//     which net/http still holds in its buffer);
//   - sendfile: cleartext HTTP/1.x through the flash_serve listener wrapper;
//   - copy: pread into pooled buffers, for TLS, HTTP/2, HTTP/3 and encode;
//   - io_uring: data not known to be in the page cache, probed span by
//     span (mincore where it tells the truth, no-wait reads elsewhere: see
//     pagecache.Probe); what is resident leaves as above, the rest is read
//     through the ring.
func (fsrv *FlashServe) pickEngine(w http.ResponseWriter, r *http.Request, res *resolved) engine {
	if res.body.Data() != nil && fsrv.engine == engineAuto {
		return engMemory
	}
	if fsrv.ring != nil && res.body.FD() >= 0 {
		// io_uring where it wins: data that may not be in the page cache.
		// A file seen whole in it within the last second goes straight to
		// sendfile or copy, without a probe.
		// A small body is not probed here: sendThroughRing reads it with
		// one RWF_NOWAIT read, which is the probe and the read at once.
		if fsrv.engine == engineIOUring || !res.body.RecentlyResident() && (res.body.Size() <= noWaitMax || !fsrv.probeWhole(res.body)) {
			return engIOUring
		}
	}
	if fsrv.engine != engineCopy && r.ProtoMajor == 1 && r.TLS == nil && res.body.FD() >= 0 {
		if _, ok := w.(io.ReaderFrom); ok {
			return engSendfile
		}
	}
	return engCopy
}

// wholeProbeMax is the largest file probed whole (one mincore over all
// of it, a byte of vector per page: 256 KiB for 1 GiB; or, for a file
// mincore cannot see, a no-wait read per 2 MiB span); larger files are
// probed chunk by chunk as they are sent.
const wholeProbeMax = 1 << 30

// probeWhole looks for the whole body in the page cache, at most once a
// second per file, and reports whether it is all there. A hot file then
// leaves by sendfile or copy without a probe per request, as a range
// request of a large file would otherwise cost one.
func (fsrv *FlashServe) probeWhole(body *statacc.Entry) bool {
	if body.Size() > wholeProbeMax || !body.ClaimProbe() {
		return false
	}
	p := pagecache.NewProbe(body.FD(), body.MincoreTrusted())
	if !p.Whole(body.Size(), residencyProbe) {
		return false
	}
	body.MarkResident()
	return true
}

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
	t := transfer{eng: fsrv.pickEngine(w, r, res), wrapped: !serverWriter(w)}
	// Counted after the body, by the engine that really sent it.
	defer func() { counters.requests[t.eng].Add(1) }()
	if fsrv.LimitRate != nil && fsrv.LimitRate.Rate > 0 {
		t.pace = &pacer{rate: fsrv.LimitRate.Rate, after: fsrv.LimitRate.After, ctx: r.Context()}
	}
	var err error
	switch {
	case p.boundary != "":
		err = fsrv.sendMultipart(w, r, res, p, &t)
	case p.ranges != nil:
		err = fsrv.sendRange(w, r, res, &t, p.ranges[0].start, p.ranges[0].length)
	default:
		err = fsrv.sendRange(w, r, res, &t, 0, p.length)
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
	eng  engine
	pace *pacer // nil without limit_rate
	// wrapped is set under a writer that is not the server's own: the
	// body is then written as file_server writes it (pattern.go).
	wrapped bool
}

// sendMultipart writes a multipart/byteranges body.
func (fsrv *FlashServe) sendMultipart(w http.ResponseWriter, r *http.Request, res *resolved, p *plan, t *transfer) error {
	var hdr [256]byte
	for i, rg := range p.ranges {
		if _, err := w.Write(appendPartHeader(hdr[:0], i, rg, p.boundary, p.partType, res.body.Size())); err != nil {
			return err
		}
		if err := fsrv.sendRange(w, r, res, t, rg.start, rg.length); err != nil {
			return err
		}
	}
	_, err := w.Write(appendMultipartEnd(hdr[:0], p.boundary))
	return err
}

// sendRange sends length bytes of the body from offset start with the
// transfer's engine, in paced chunks under limit_rate.
func (fsrv *FlashServe) sendRange(w http.ResponseWriter, r *http.Request, res *resolved, t *transfer, start, length int64) error {
	if t.pace == nil {
		return fsrv.sendChunk(w, r, res, t, start, length)
	}
	for length > 0 {
		n := t.pace.next(length)
		if err := t.pace.wait(); err != nil {
			return err
		}
		if err := fsrv.sendChunk(w, r, res, t, start, n); err != nil {
			return err
		}
		t.pace.sent += n
		start += n
		length -= n
	}
	return nil
}

// sendChunk moves one run of body bytes with the transfer's engine. When
// sendfile turns out to be impossible (no listener wrapper), the transfer
// goes on as a copy.
func (fsrv *FlashServe) sendChunk(w http.ResponseWriter, r *http.Request, res *resolved, t *transfer, start, length int64) error {
	body := res.body
	eng := t.eng
	var n int64
	var err error
	if t.wrapped {
		n, eng, err = fsrv.sendLikeFileServer(w, res, t, start, length)
		counters.bytes[eng].Add(n)
		t.eng = eng
		return err
	}
	switch eng {
	case engMemory:
		n, err = writeCopy(w, body.Data()[start:start+length])
	case engIOUring:
		// sendThroughRing counts its bytes by the way each run left.
		_, err = fsrv.sendThroughRing(w, r, res, t, start, length)
		return err
	case engSendfile:
		file, fd := res.bodyFile()
		var zeroCopy bool
		n, zeroCopy, err = fsrv.sendFile(w.(io.ReaderFrom), w, r, file, fd, res.body.Head(), start, length)
		if !zeroCopy {
			eng, t.eng = engCopy, engCopy
		}
	default:
		file, _ := res.bodyFile()
		if r.ProtoMajor >= 2 {
			n, err = transmit.CopySmall(w, file, start, length)
		} else {
			n, err = transmit.Copy(w, file, start, length)
		}
	}
	counters.bytes[eng].Add(n)
	return err
}

// memChunk is the most bytes of a memory-cached body copied per Write: a
// file of the default memory_cache max_file leaves in one Write, with the
// headers.
const memChunk = 16 << 10

var memBufPool = sync.Pool{New: func() any { b := make([]byte, memChunk); return &b }}

// writeCopy writes b, shared by every response of its file, through a
// pooled buffer: a writer in front (encode, templates, any handler's
// wrapper) is given bytes it may keep or change without reaching the cache.
func writeCopy(w io.Writer, b []byte) (int64, error) {
	bp := memBufPool.Get().(*[]byte)
	defer memBufPool.Put(bp)
	var n int64
	for len(b) > 0 {
		k := copy(*bp, b)
		m, err := w.Write((*bp)[:k])
		n += int64(m)
		if err != nil {
			return n, err
		}
		b = b[k:]
	}
	return n, nil
}

var sourcePool = sync.Pool{New: func() any { return new(transmit.FileSource) }}

// sendFile hands the body down the writer chain as a *transmit.FileSource,
// which the listener wrapper's connection sends with sendfile.
// It reports whether the bytes really went with sendfile.
func (fsrv *FlashServe) sendFile(rf io.ReaderFrom, w http.ResponseWriter, r *http.Request, file *os.File, fd int, head []byte, start, length int64) (int64, bool, error) {
	src := sourcePool.Get().(*transmit.FileSource)
	*src = transmit.FileSource{File: file, FD: fd, Off: start, N: length, Head: head}
	defer func() {
		*src = transmit.FileSource{}
		sourcePool.Put(src)
	}()
	if restore := widenWriteChunk(w, fsrv.sendfileMaxChunk, src); restore != nil {
		defer restore()
	}
	// One ReadFrom sends the whole body through the listener wrapper. A
	// chain that copies instead ends each ReadFrom after one ReadTurn, so
	// that Caddy renews its deadline between them: loop until done.
	var n int64
	var err error
	for {
		src.StartTurn()
		var k int64
		k, err = rf.ReadFrom(src)
		n += k
		if err != nil || src.N <= 0 || k <= 0 {
			break
		}
	}
	if err == nil && n != length {
		err = &transmit.ReadError{Offset: start + n, Err: transmit.ErrTruncated}
	}
	if src.Refused {
		fsrv.logger.Debug("sendfile refused by the kernel; the rest of the body was copied",
			zap.String("filename", file.Name()))
	}
	zeroCopy := src.ZeroCopy
	if !zeroCopy && !src.Refused && length > sniffLen {
		fsrv.noZeroCopy(r)
	}
	return n, zeroCopy, err
}

// sniffLen is what net/http copies through its own buffer before it hands
// a ReadFrom to the connection.
const sniffLen = 512

// widenWriteChunk raises Caddy's write chunk (max_write_chunk, 64 KiB by
// default) to the sendfile chunk for this response, so that one turn of
// the listener wrapper's connection can send up to that much, as nginx's
// sendfile_max_chunk does, and hands the connection Caddy's write-idle
// policy, which it applies within the turn (transmit.IdlePolicy). The
// rate window is left alone: Override would restart it on every call.
// Caddy's own chunk stays the bound of a turn that is copied through its
// writer (src.ReadTurn), so that its deadline is renewed as often as for
// file_server.
func widenWriteChunk(w http.ResponseWriter, chunk int, src *transmit.FileSource) (restore func()) {
	for {
		if itw, ok := w.(*caddyhttp.IdleTimeoutWriter); ok {
			src.Idle = transmit.IdlePolicy{
				Timeout: itw.Deadline.Timeout,
				MinRate: itw.Deadline.MinRate,
				Ceiling: itw.Deadline.HardDeadline,
			}
			prev := itw.MaxChunk
			own := prev
			if own <= 0 {
				own = caddyhttp.DefaultMaxWriteChunk
			}
			src.ReadTurn = int64(own)
			if own >= chunk {
				return nil
			}
			itw.MaxChunk = chunk
			return func() { itw.MaxChunk = prev }
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
				"because this server has no flash_serve listener wrapper",
				zap.String("fix", "list flash_serve in listener_wrappers of the global servers option "+
					"(README: A first Caddyfile)"),
				zap.String("server_json_field", `"listener_wrappers": [{"wrapper": "flash_serve"}]`))
			return
		}
		fsrv.logger.Warn("cleartext HTTP/1 responses are copied although the flash_serve listener wrapper is configured",
			zap.String("cause", "a handler in front (encode), a listener wrapper after it (proxy_protocol), or "+
				"protocols without h2 (Caddy then wraps every connection) hide the connection"),
			zap.String("fix", "list flash_serve last in listener_wrappers"))
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
