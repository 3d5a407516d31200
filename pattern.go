package flashserve

import (
	"bytes"
	"io"
	"net/http"
	"reflect"
	"sync"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
	"github.com/flashserve/caddy-flash-serve/transmit"
)

// A handler after flash_serve's in the writer chain (encode, a plugin's
// wrapper) may answer differently depending on how the body is cut into
// writes: zstd, for one, ends a block at every flush of what it was
// given, so one write of a whole small file and file_server's way (a
// 512-byte sniff, then the rest through ReadFrom) give different bytes.
// Under such a writer the body is written the way file_server writes it:
// io.CopyN from a reader of the file, as http.ServeContent does. On the
// server's own writer, nothing changes.

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

// sendLikeFileServer writes length bytes of the body from start with
// io.CopyN, the call http.ServeContent makes: a writer with ReadFrom gets
// the reader, any other gets 32 KiB writes. The reader of a file is a
// *transmit.FileSource without the cached head, so that every read is
// filled as a file's is; on a cleartext HTTP/1.x connection through the
// listener wrapper it still leaves with sendfile if the writers pass
// ReadFrom down. It reports the bytes written and the engine that sent
// them.
func (fsrv *FlashServe) sendLikeFileServer(w http.ResponseWriter, res *resolved, t *transfer, start, length int64) (int64, engine, error) {
	body := res.body
	if t.eng == engMemory {
		n, err := io.CopyN(w, bytes.NewReader(body.Data()[start:start+length]), length)
		return n, engMemory, err
	}
	if t.eng == engIOUring {
		rr := ringReaderPool.Get().(*ringReader)
		*rr = ringReader{fsrv: fsrv, res: res, off: start, n: length, eng: engCopy}
		n, err := io.CopyN(w, rr, length)
		eng := rr.eng
		rr.release()
		return n, eng, err
	}
	file, fd := res.bodyFile()
	src := sourcePool.Get().(*transmit.FileSource)
	*src = transmit.FileSource{File: file, FD: fd, Off: start, N: length}
	defer func() {
		*src = transmit.FileSource{}
		sourcePool.Put(src)
	}()
	n, err := io.CopyN(w, src, length)
	if err == io.EOF {
		err = &transmit.ReadError{Offset: start + n, Err: transmit.ErrTruncated}
	}
	if src.ZeroCopy {
		return n, engSendfile, err
	}
	return n, engCopy, err
}

// ringReader reads a body through the io_uring ring for io.CopyN, a
// chunk at a time into a pooled buffer; every Read is filled whole, as a
// file's is, so that the writes that follow are file_server's.
type ringReader struct {
	fsrv   *FlashServe
	res    *resolved
	off, n int64 // the next offset to read into buf, and the bytes left to read
	bufp   *[]byte
	buf    []byte // read and not yet handed out
	eng    engine // engIOUring, or engCopy if every read fell back to pread
	err    error
}

var ringReaderPool = sync.Pool{New: func() any { return new(ringReader) }}

func (rr *ringReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if len(rr.buf) == 0 {
			if rr.err != nil {
				break
			}
			if rr.n <= 0 {
				rr.err = io.EOF
				break
			}
			rr.fill()
			continue
		}
		k := copy(p[n:], rr.buf)
		rr.buf = rr.buf[k:]
		n += k
	}
	if n == 0 {
		return 0, rr.err
	}
	return n, nil
}

// fill reads the next chunk, through the ring, or with pread when the
// ring itself failed.
func (rr *ringReader) fill() {
	if rr.bufp == nil {
		rr.bufp = coldBufPool.Get().(*[]byte)
	}
	buf := (*rr.bufp)[:min(int64(len(*rr.bufp)), rr.n)]
	file, fd := rr.res.bodyFile()
	k, err := rr.fsrv.ring.ReadAt(fd, buf, rr.off)
	if err != nil && ringFault(err) {
		counters.ringFallbacks.Add(1)
		k, err = file.ReadAt(buf, rr.off)
	} else {
		rr.eng = engIOUring
	}
	if err := pagecache.ShortRead(k, len(buf), err); err != nil {
		rr.err = &transmit.ReadError{Offset: rr.off + int64(k), Err: err}
	}
	rr.buf = buf[:k]
	rr.off += int64(k)
	rr.n -= int64(k)
}

func (rr *ringReader) release() {
	if rr.bufp != nil {
		coldBufPool.Put(rr.bufp)
	}
	*rr = ringReader{}
	ringReaderPool.Put(rr)
}
