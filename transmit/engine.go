// Package transmit moves a response's body bytes from a file to the
// client: a handler's Sender chooses the Engine of each response (Choose)
// and sends the body with it (Send).
package transmit

import (
	"io"
	"net/http"

	"go.uber.org/zap"

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// Engine is a way a body's bytes leave (see Choose).
type Engine uint8

// The engines, and their number.
const (
	EngineMemory Engine = iota
	EngineSendfile
	EngineIOUring
	EngineCopy
	NumEngines
)

var engineNames = [NumEngines]string{"memory", "sendfile", "io_uring", "copy"}

// String returns the engine's name in the metrics.
func (e Engine) String() string { return engineNames[e] }

// Counts are body bytes sent, by the engine that sent them.
type Counts [NumEngines]int64

// The transmit policies, the values of the handler's transmit option:
// auto, or the engine every body is sent with.
const (
	PolicyAuto     = "auto"
	PolicySendfile = "sendfile"
	PolicyCopy     = "copy"
	PolicyIOUring  = "io_uring"
)

// Body is a response body's open file as the handler's cache shares it
// between requests (a *statacc.Entry, whose methods say what each is).
// Data, the file in memory, is shared by every response: Send copies it
// before a writer sees it, and never mixes it with bytes read from the
// file, which may have changed since unseen. Hold keeps the descriptor
// open for a ring read its request let go of.
type Body interface {
	File() io.ReaderAt
	FD() int
	Path() string
	Size() int64
	Data() []byte
	Hold()
	Release()
	FileID() uint64
	NoBlockDevice() bool
	MincoreTrusted() bool
	MarkResident()
	RecentlyResident() bool
	ClaimProbe() bool
	InMemoryFS() bool
}

// Transfer is one response body on its way out, over the Send calls of its
// ranges and paced chunks.
type Transfer struct {
	// Engine is Choose's at first, then the one that sent the last bytes.
	Engine Engine
	// FileServerWrites: a writer in front is not the server's own, so the
	// body is written the way file_server writes it (sendLikeFileServer).
	FileServerWrites bool
	// missingAt, when missingKnown, is where Choose's probe of the whole
	// file found its data leave the page cache: that span is read through
	// the ring unprobed. Probed again with no-wait reads it would seem
	// resident (the read that found it missing started the kernel reading
	// it), and a sendfile would block on the rest of the span.
	missingAt    int64
	missingKnown bool
	// ContentLength is the whole body's length declared in the
	// Content-Length header, 0 if none. A sendfile body has its header
	// written first (headerFirst) only while the header still says so:
	// net/http checks writes against the header, not what its ReadFrom
	// hands the connection, and a rule may have rewritten it.
	ContentLength int64
	// throughRing: a Send of the transfer went to the ring's engine, so the
	// rest does too (the next range or paced chunk may be on disk), though
	// Engine may say copy after a small range read from the page cache.
	throughRing bool
}

// Sender sends the bodies of one handler's responses. Its fields are set
// at provision (Open) and not changed after.
type Sender struct {
	// Policy is the handler's transmit option. With PolicyIOUring every
	// byte of an EngineIOUring body is read through the ring.
	Policy           string
	Ring             *Ring // nil without io_uring
	SendfileMaxChunk int   // the most one turn of a wrapped connection sends
	Logger           *zap.Logger
	// Copied, if set, is called when a cleartext HTTP/1 body handed down
	// for sendfile was copied although the kernel did not refuse sendfile
	// (no listener wrapper, or a writer hides the connection).
	Copied func(*http.Request)

	holdsRing  bool       // Open took a ring reference
	firstReads firstReads // how small bodies are first read (cold.go)
}

func (s *Sender) ringOnly() bool { return s.Policy == PolicyIOUring }

// Open sets the sender up for its Policy (auto if empty), with a reference
// to the process's io_uring where the policy may use it; Close gives it
// back.
func (s *Sender) Open(workers int, logger *zap.Logger) {
	if s.Policy == "" {
		s.Policy = PolicyAuto
	}
	s.Logger = logger
	if s.Policy == PolicyAuto || s.Policy == PolicyIOUring {
		s.Ring = AcquireRing(workers, s.Policy == PolicyIOUring, logger)
		s.holdsRing = true
	}
}

// Close gives back the ring reference Open took, if any.
func (s *Sender) Close() {
	if s.holdsRing {
		s.holdsRing = false
		ReleaseRing()
	}
}

// Choose picks the engine of one response body under the sender's policy:
//   - memory: a small file kept in memory, one Write (with the headers,
//     which net/http still holds in its buffer);
//   - sendfile: cleartext HTTP/1.x through the listener wrapper;
//   - copy: pread into pooled buffers, for TLS, HTTP/2, HTTP/3 and encode;
//   - io_uring: data not known to be in the page cache (a file on tmpfs
//     always is); what is resident leaves as above, the rest is read
//     through the ring.
//
// A policy left empty is auto, as Open makes it.
func (s *Sender) Choose(w http.ResponseWriter, r *http.Request, body Body) Transfer {
	// A body kept in memory leaves from memory whatever the policy: it may
	// have no descriptor (statacc closed it), and one file's bodies must
	// not switch between the copy and the file, which a write through a
	// shared mapping changes without an event (the copy would then take
	// a body back to older bytes). memory_cache 0 keeps none.
	if body.Data() != nil {
		return Transfer{Engine: EngineMemory}
	}
	if s.Ring != nil && body.FD() >= 0 && (!body.InMemoryFS() || s.Policy == PolicyIOUring) {
		t := Transfer{Engine: EngineIOUring}
		// A small body is not probed here: its one RWF_NOWAIT read is the
		// probe and the read at once. A body seen whole in the page cache
		// moments ago is not probed either (statacc's RecentlyResident).
		if s.Policy == PolicyIOUring || (!body.RecentlyResident() && (body.Size() <= noWaitMax || !probeWhole(body, &t))) {
			return t
		}
	}
	if s.Policy != PolicyCopy && handedDown(w, r, body) {
		if sendfileBuilt && !noWrapper(r) { // canSendfile
			return Transfer{Engine: EngineSendfile}
		}
		// Copied here, through a pooled buffer, rather than handed down
		// to be copied by net/http; the handler still says once why.
		if s.Copied != nil && sendfileBuilt && body.Size() > sniffLen {
			s.Copied(r)
		}
	}
	return Transfer{Engine: EngineCopy}
}

// handedDown reports whether the response could be handed to the writer
// chain as a file: cleartext HTTP/1.x, a writer with ReadFrom, a file.
func handedDown(w http.ResponseWriter, r *http.Request, body Body) bool {
	_, ok := w.(io.ReaderFrom)
	return ok && r.ProtoMajor == 1 && r.TLS == nil && body.FD() >= 0
}

// canSendfile reports whether the response is handed to the writer chain
// for sendfile: handedDown, on a server with the listener wrapper, in a
// build that has sendfile. Anything else below the writers would copy the
// body through a buffer net/http allocates for it.
func canSendfile(w http.ResponseWriter, r *http.Request, body Body) bool {
	return sendfileBuilt && handedDown(w, r, body) && !noWrapper(r)
}

// residencyProbe is the span probed at a time. wholeProbeMax is the
// largest file probed whole (mincore's vector is a byte per page).
const (
	residencyProbe = 2 << 20
	wholeProbeMax  = 1 << 30
)

// newProbe returns the page-cache probe of a body: mincore where it tells
// this process the truth, no-wait reads elsewhere.
func newProbe(f Body) pagecache.Probe {
	return pagecache.NewProbe(f.FD(), f.MincoreTrusted(), f.Size())
}

// firstMissing returns where the file stops being in the page cache: its
// size when it is all there; ok is false when nothing could be learnt.
func firstMissing(f Body) (off int64, ok bool) {
	p := newProbe(f)
	return p.FirstMissing(f.Size(), residencyProbe)
}

// probeWhole looks for the whole body in the page cache, at most once a
// second per file, and reports whether it is all there: a hot file then
// leaves without a probe per request. Where it is not, t learns where its
// data stops being there.
func probeWhole(body Body, t *Transfer) bool {
	if body.Size() > wholeProbeMax || !body.ClaimProbe() {
		return false
	}
	off, ok := firstMissing(body)
	if !ok {
		return false
	}
	if off < body.Size() {
		t.missingAt, t.missingKnown = off, true
		return false
	}
	body.MarkResident()
	return true
}

// Send sends length bytes of body from offset start to w with t.Engine,
// the status and headers being written already, and returns how many
// bytes each engine sent. A *ReadError means the file could not be read
// (truncated, a disk error): the body can no longer be completed honestly.
// Any other error is the client's.
func (s *Sender) Send(w http.ResponseWriter, r *http.Request, body Body, t *Transfer, start, length int64) (Counts, error) {
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
		pool, _ := copyPool(r)
		n, err = copyWith(pool, w, body.File(), start, length)
	}
	sent[t.Engine] = n
	return sent, err
}
