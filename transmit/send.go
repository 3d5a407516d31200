package transmit

import (
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

// Body is a response body's file as the handler's cache shares it
// between requests (a *statacc.Entry): open, and what the cache keeps of
// it in memory.
type Body interface {
	// File is the open file, read at explicit offsets (pread); FD its
	// descriptor, read once at open; Path its name, for the logs.
	File() io.ReaderAt
	FD() int
	Path() string
	// Size is the file's size: a body of all of it that had to be read
	// through the ring marks the file resident once it is sent.
	Size() int64
	// Data, if not nil, is the whole file in memory, for EngineMemory. It
	// is shared by every response: Send copies it before a writer sees
	// it. It is sent only whole or in ranges of it, never together with
	// bytes read from the file: the file may have changed since Data was
	// read, unseen (a write through a shared mapping sends no event).
	Data() []byte
	// Hold takes one more reference on the open file and Release gives
	// one back: a ring read that its request let go of keeps the
	// descriptor open until the kernel completes it.
	Hold()
	Release()
	// FileID identifies the file (its device and inode), 0 if unknown:
	// the bound on ring reads of one file in flight counts by it.
	FileID() uint64
	// NoBlockDevice reports a filesystem without a block device (FUSE,
	// NFS, tmpfs), whose ring reads are submitted differently.
	NoBlockDevice() bool
	// MincoreTrusted reports whether mincore(2) tells this process the
	// truth about the file's pages (it owns the file or may write it).
	MincoreTrusted() bool
	// MarkResident records that the whole file is in the page cache now;
	// RecentlyResident reports whether that was within the last second;
	// ClaimProbe is true for one caller a second, who may look for the
	// whole file in the page cache.
	MarkResident()
	RecentlyResident() bool
	ClaimProbe() bool
	// InMemoryFS reports a file on tmpfs or ramfs, always in the page
	// cache.
	InMemoryFS() bool
}

// Transfer is one response body on its way out, over the Send calls of
// its ranges and paced chunks.
type Transfer struct {
	// Engine is the engine the next bytes leave with: the handler's
	// choice at first, then the one that sent the last bytes. Sendfile
	// becomes copy where the writer chain or the kernel does not take
	// it; io_uring becomes copy when a small body was read whole from
	// the page cache.
	Engine Engine
	// FileServerWrites is set under a writer that is not the server's
	// own (encode, a plugin's wrapper), which may answer differently
	// depending on how the body is cut into writes: the body is then
	// written the way file_server writes it.
	FileServerWrites bool
	// MissingAt, when MissingKnown, is where the handler's probe of the
	// whole file (FirstMissing) has just found its data leave the page
	// cache: the span of the ring's engine that holds it is read through
	// the ring without being probed again. Probed again with no-wait reads
	// (a file mincore does not tell this process about), it would seem
	// resident: the read that found it missing started the kernel reading
	// that page, and a sendfile would then block on the rest of the span.
	MissingAt    int64
	MissingKnown bool
	// ContentLength is the length of the whole response body (every
	// range, every part of a multipart body) that the handler declared in
	// its Content-Length header; 0 if it declared none. A body sendfile
	// sends may have its header written first (headerFirst) only while
	// the header still declares that length: net/http checks what is
	// written through it against the header, but not what its ReadFrom
	// hands the connection, and a rule may have rewritten the header.
	ContentLength int64
	// throughRing is set once a Send of the transfer went to the ring's
	// engine: the rest of it goes there too, though Engine, which counts
	// the request, says copy after a small range read whole from the page
	// cache. The next range or paced chunk may be on disk.
	throughRing bool
}

// Sender sends the bodies of one handler's responses. Its fields are set
// at provision (Open) and not changed after.
type Sender struct {
	// Policy is the handler's transmit option (PolicyAuto, or the engine
	// it forces). With PolicyIOUring every byte of an EngineIOUring body
	// is read through the ring, without asking the page cache first.
	Policy string
	// Ring reads data not in the page cache; nil without io_uring.
	Ring *Ring
	// SendfileMaxChunk is the most bytes one turn of the listener
	// wrapper's connection sends (sendfile_max_chunk).
	SendfileMaxChunk int
	// Logger gets the debug messages: sendfile refused by the kernel, a
	// ring read redone with pread.
	Logger *zap.Logger
	// Copied, if set, is called when a cleartext HTTP/1 body handed to
	// the writer chain for sendfile was copied instead, although the
	// kernel did not refuse sendfile: the listener wrapper is missing, or
	// a writer or wrapper hides the connection.
	Copied func(*http.Request)

	holdsRing  bool       // Open took a ring reference
	firstReads firstReads // how small bodies are first read (cold.go)
}

// ringOnly: every byte of an EngineIOUring body goes through the ring.
func (s *Sender) ringOnly() bool { return s.Policy == PolicyIOUring }

// Send sends length bytes of body from offset start to w with t.Engine,
// and returns how many of them each engine sent. The response's status
// and headers are written already. A *ReadError means the file could not
// be read (it was truncated, the disk failed): the body can no longer be
// completed honestly. Any other error is the client's.
func (s *Sender) Send(w http.ResponseWriter, r *http.Request, body Body, t *Transfer, start, length int64) (Counts, error) {
	return s.send(w, r, body, t, start, length)
}

// Gathering is a response whose writes the listener wrapper's connection
// gathers (coalesce.go); its zero value gathers nothing.
type Gathering struct {
	c      *conn
	bottom http.Flusher
}

// Gather makes the connection of r gather the writes of a response of
// length bytes whose body t.Engine copies (memory, io_uring), so that its
// headers and body leave in one write, if the listener wrapper made the
// connection, r is cleartext HTTP/1 and the writer chain is the server's
// own, without a writer that buffers the body. The caller must call
// Release once the body is written, also on a panic, and must not gather
// across a wait (limit_rate's pacing).
func Gather(w http.ResponseWriter, r *http.Request, t *Transfer, length int64) Gathering {
	if t.FileServerWrites || (t.Engine != EngineMemory && t.Engine != EngineIOUring) || length <= gatherMin {
		return Gathering{}
	}
	bottom := unbufferedBottom(w)
	if bottom == nil {
		return Gathering{}
	}
	c := holdHead(r)
	if c == nil {
		return Gathering{}
	}
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

func (s *Sender) send(w http.ResponseWriter, r *http.Request, body Body, t *Transfer, start, length int64) (Counts, error) {
	var sent Counts
	var n int64
	var err error
	if t.FileServerWrites {
		n, t.Engine, err = s.sendLikeFileServer(w, r, body, t.Engine, start, length)
		sent[t.Engine] = n
		return sent, err
	}
	if t.Engine == EngineIOUring || t.throughRing {
		t.throughRing = true
		return s.sendThroughRing(w, r, body, t, start, length)
	}
	switch t.Engine {
	case EngineMemory:
		n, err = writeCopy(w, body.Data()[start:start+length])
	case EngineSendfile:
		var zeroCopy bool
		n, zeroCopy, err = s.sendFile(w, r, body, t.ContentLength, start, length)
		if !zeroCopy {
			t.Engine = EngineCopy
		}
	default:
		if r.ProtoMajor >= 2 {
			n, err = copyRangeSmall(w, body.File(), start, length)
		} else {
			n, err = copyRange(w, body.File(), start, length)
		}
	}
	sent[t.Engine] = n
	return sent, err
}

// gatherMin is the largest body not gathered: net/http's 4 KiB buffer
// sends it with the headers in one write already (unless they are over
// 2 KiB). It is also net/http's own threshold (bufferBeforeChunkingSize):
// a body written whole that is larger has its headers decided, chunked or
// not, when it is written, so flushing after it changes nothing that the
// client sees; a smaller one, flushed before the handler returns, would
// lose the Content-Length net/http adds when a rule removed it.
const gatherMin = 2 << 10

// unbufferedBottom returns the writer at the bottom of w's chain, net/http's
// own under the server's writers (t.FileServerWrites unset), which pass
// every byte through unchanged; nil if a writer of the chain keeps the
// body (a recorder that buffers, as templates' does), which must not see
// the bottom flushed under it.
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

var sourcePool = sync.Pool{New: func() any { return new(fileSource) }}

// sniffLen is what net/http copies through its own buffer before it hands
// a ReadFrom to the connection, unless the response's header is written
// already.
const sniffLen = 512

// sendFile hands the body down the writer chain, which must have
// ReadFrom (canSendfile), as a *fileSource: the listener wrapper's
// connection sends it with sendfile. declared is the whole response
// body's length (Transfer.ContentLength). It reports whether the bytes
// really went with sendfile.
func (s *Sender) sendFile(w http.ResponseWriter, r *http.Request, body Body, declared, start, length int64) (int64, bool, error) {
	rf := w.(io.ReaderFrom)
	file := body.File()
	src := sourcePool.Get().(*fileSource)
	*src = fileSource{File: file, FD: body.FD(), Off: start, N: length}
	defer func() {
		*src = fileSource{}
		sourcePool.Put(src)
	}()
	if restore := widenWriteChunk(w, s.SendfileMaxChunk, src); restore != nil {
		defer restore()
	}
	if length > sniffLen {
		if c := headerFirst(w, r, declared); c != nil {
			defer c.releaseHead()
		}
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

// headerFirst writes the response's header, and what else net/http
// buffers, to the connection before the body's ReadFrom, if the listener
// wrapper made the connection (holdHead), which holds it until sendfile's
// first bytes follow it (with MSG_MORE, so that they share a segment).
// net/http, which has then written the header, hands the whole body to
// the connection's ReadFrom instead of copying its first 512 bytes through
// its own buffer: the whole body leaves by sendfile, every byte read from
// the file as it is sent, and no pread is made for the first ones.
//
// It is done only where the client can see no difference: a body of more
// than sniffLen bytes (net/http flushes the header after copying that
// much anyway; a smaller one it keeps, and derives a Content-Length from
// it if a rule removed the header's), and a header with its Content-Type
// (net/http would sniff one from the first bytes), no Transfer-Encoding
// and a Content-Length of the declared body's length (net/http then
// neither chunks the body nor closes the connection after it). net/http
// refuses a Write past its Content-Length but not what its ReadFrom hands
// the connection: under a rule that rewrote the header below the body's
// length, file_server's 512-byte copy is refused (no body byte, the
// connection closed), where sendfile would send every byte, and a client
// that reuses the connection would read those past the header's length
// as the next response. The header is read after WriteHeader, when
// Caddy's deferred header rules have run and net/http has its snapshot,
// so that reading it allocates nothing. The caller must call releaseHead
// on the connection returned, if any.
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
	bottom := unbufferedBottom(w)
	if bottom == nil {
		return nil
	}
	c := holdHead(r)
	if c == nil {
		return nil
	}
	bottom.Flush()
	return c
}

// widenWriteChunk raises Caddy's write chunk (max_write_chunk, 64 KiB by
// default) to the sendfile chunk for this response, so that one turn of
// the listener wrapper's connection can send up to that much, as nginx's
// sendfile_max_chunk does, and hands the connection Caddy's write-idle
// policy, which it applies within the turn (idlePolicy). The rate window
// is left alone: Override would restart it on every call. Caddy's own
// chunk stays the bound of a turn that is copied through its writer
// (src.ReadTurn), so that its deadline is renewed as often as for
// file_server.
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
