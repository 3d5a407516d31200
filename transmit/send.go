package transmit

import (
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

// Gathering is a response whose writes the listener wrapper's connection
// gathers (coalesce.go); its zero value gathers nothing.
type Gathering struct {
	c      *conn
	bottom http.Flusher
}

// Gather makes the connection of r gather the writes of a response of
// length bytes whose body t.Engine copies (memory, io_uring), so that its
// headers and body leave in one write, if the listener wrapper made the
// connection, r is cleartext HTTP/1 and no writer of the chain buffers the
// body or is not the server's own. The caller must call Release once the
// body is written, also on a panic, and must not gather across a wait
// (limit_rate's pacing).
func Gather(w http.ResponseWriter, r *http.Request, t *Transfer, length int64) Gathering {
	if t.FileServerWrites || (t.Engine != EngineMemory && t.Engine != EngineIOUring) || length <= gatherMin {
		return Gathering{}
	}
	c, bottom := holdBelow(w, r)
	return Gathering{c: c, bottom: bottom}
}

// Release flushes what net/http still buffers (the body's last bytes) to
// what the connection gathered, and sends it all.
func (g Gathering) Release() error {
	if g.c == nil {
		return nil
	}
	g.bottom.Flush()
	return g.c.releaseHead()
}

// gatherMin is the largest body not gathered: net/http's buffer sends it
// with the headers in one write already. It is also net/http's
// bufferBeforeChunkingSize: a smaller body flushed before the handler
// returns would lose the Content-Length net/http adds when a rule removed
// it; a larger one has its headers decided when it is written.
const gatherMin = 2 << 10

// holdBelow makes r's connection gather its writes (holdHead) and returns
// it with the bottom of w's chain, which the caller flushes into it; nil
// if the listener wrapper did not make the connection, or a writer of the
// chain keeps the body (unbufferedBottom).
func holdBelow(w http.ResponseWriter, r *http.Request) (*conn, http.Flusher) {
	bottom := unbufferedBottom(w)
	if bottom == nil {
		return nil, nil
	}
	c := holdHead(r)
	if c == nil {
		return nil, nil
	}
	return c, bottom
}

// unbufferedBottom returns the writer at the bottom of w's chain
// (net/http's own); nil if a writer of the chain keeps the body (a
// recorder that buffers, as templates' does), which must not see the
// bottom flushed under it.
func unbufferedBottom(w http.ResponseWriter) http.Flusher {
	for {
		if b, ok := w.(interface{ Buffered() bool }); ok && b.Buffered() {
			return nil
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	f, _ := w.(http.Flusher)
	return f
}

// memChunk is the most bytes of a memory-cached body copied per Write: a
// file of the default memory_cache max_file leaves in one Write, with the
// headers.
const memChunk = 16 << 10

var memBufPool = sync.Pool{New: func() any { b := make([]byte, memChunk); return &b }}

// writeCopy writes b, shared by every response of its file, through a
// pooled buffer: a writer in front (encode, templates) may keep or change
// the bytes it is given without reaching the cache.
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

var sourcePool = sync.Pool{New: func() any { return new(fileSource) }}

func getSource(body Body, off, n int64) *fileSource {
	src := sourcePool.Get().(*fileSource)
	*src = fileSource{File: body.File(), FD: body.FD(), Off: off, N: n}
	return src
}

func putSource(src *fileSource) {
	*src = fileSource{}
	sourcePool.Put(src)
}

// sniffLen is what net/http copies through its own buffer before it hands
// a ReadFrom to the connection, unless the header is written already.
const sniffLen = 512

// sendFile hands the body down the writer chain, which must have ReadFrom
// (canSendfile), as a *fileSource: the listener wrapper's connection sends
// it with sendfile. declared is Transfer.ContentLength. It reports whether
// the bytes really went with sendfile.
func (s *Sender) sendFile(w http.ResponseWriter, r *http.Request, body Body, declared, start, length int64) (int64, bool, error) {
	rf := w.(io.ReaderFrom)
	src := getSource(body, start, length)
	defer putSource(src)
	if restore := widenWriteChunk(w, s.SendfileMaxChunk, src); restore != nil {
		defer restore()
	}
	// A body of sniffLen or less net/http keeps whole, and derives a
	// Content-Length from it if a rule removed the header's.
	if length > sniffLen {
		if c := headerFirst(w, r, declared); c != nil {
			defer c.releaseHead()
		}
	}
	// A chain that copies instead of handing the source to the connection
	// ends each ReadFrom after one ReadTurn, so that Caddy renews its
	// deadline between them: loop until done.
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
		err = &ReadError{Offset: start + n, Err: errTruncated}
	}
	if src.Refused {
		s.Logger.Debug("sendfile refused by the kernel; the rest of the body was copied",
			zap.String("filename", body.Path()))
	}
	zeroCopy := src.ZeroCopy
	if !zeroCopy && !src.Refused && length > sniffLen && s.Copied != nil {
		s.Copied(r)
	}
	return n, zeroCopy, err
}

// headerFirst writes the response's header to the connection before the
// body's ReadFrom, held until sendfile's first bytes follow (MSG_MORE, one
// segment): net/http then hands the whole body to the connection instead
// of copying its first 512 bytes itself.
//
// Only where the client sees no difference: a Content-Type (else net/http
// sniffs one), no Transfer-Encoding, and a Content-Length of the declared
// length: under a rule that rewrote it lower, file_server's 512-byte copy
// is refused while sendfile would send every byte, which a client reusing
// the connection would read as the next response. The header is read
// after WriteHeader, once Caddy's deferred rules have run. The caller
// must call releaseHead on the connection returned, if any.
func headerFirst(w http.ResponseWriter, r *http.Request, declared int64) *conn {
	h := w.Header()
	if _, ok := h["Content-Type"]; !ok {
		return nil
	}
	// The value net/http reads (the first), parsed as it parses it.
	cl := h["Content-Length"]
	if len(cl) == 0 || declared <= 0 {
		return nil
	}
	if v, err := strconv.ParseInt(cl[0], 10, 64); err != nil || v != declared {
		return nil
	}
	if _, ok := h["Transfer-Encoding"]; ok {
		return nil
	}
	c, bottom := holdBelow(w, r)
	if c == nil {
		return nil
	}
	bottom.Flush()
	return c
}

// widenWriteChunk raises Caddy's write chunk (max_write_chunk) to the
// sendfile chunk for this response, as nginx's sendfile_max_chunk, and
// hands the connection Caddy's write-idle policy to apply within a turn
// (Override would restart the rate window). Caddy's own chunk stays the
// bound of a turn copied through its writer (src.ReadTurn), so that its
// deadline is renewed as often as for file_server.
func widenWriteChunk(w http.ResponseWriter, chunk int, src *fileSource) (restore func()) {
	for {
		if itw, ok := w.(*caddyhttp.IdleTimeoutWriter); ok {
			src.Idle = idlePolicy{
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
