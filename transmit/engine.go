package transmit

import (
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// The transmit policies, the values of the handler's transmit option:
// auto, or the engine every body is sent with.
const (
	PolicyAuto     = "auto"
	PolicySendfile = "sendfile"
	PolicyCopy     = "copy"
	PolicyIOUring  = "io_uring"
)

// Engine is a way a body's bytes leave: the handler picks one per
// response (its transmit policy), and Send may change it when the body
// cannot, or need not, leave that way.
type Engine uint8

// The engines.
const (
	// EngineMemory writes a small file kept in memory.
	EngineMemory Engine = iota
	// EngineSendfile hands the file to the listener wrapper's connection,
	// which sends it with sendfile(2).
	EngineSendfile
	// EngineIOUring reads data not in the page cache through io_uring;
	// what is resident leaves by sendfile or copy.
	EngineIOUring
	// EngineCopy reads with pread into pooled buffers and writes them.
	EngineCopy
	// NumEngines is the number of engines.
	NumEngines
)

var engineNames = [NumEngines]string{"memory", "sendfile", "io_uring", "copy"}

// String returns the engine's name in the metrics: memory, sendfile,
// io_uring or copy.
func (e Engine) String() string { return engineNames[e] }

// Counts are body bytes sent, by the engine that sent them.
type Counts [NumEngines]int64

// Stats are the process-wide counters of package transmit.
type Stats struct {
	// SendfileBytes and SendfileCalls count what the listener wrapper's
	// connections sent with sendfile(2), and in how many calls.
	SendfileBytes, SendfileCalls int64
	// SendfileFallbacks counts ReadFrom calls on a wrapped connection that
	// were not a flash_serve body, or not a file, and were copied.
	SendfileFallbacks int64
	// SendfileRefused counts sendfile calls the kernel refused (EINVAL,
	// ENOSYS, EOPNOTSUPP); the rest of each of those bodies was copied.
	SendfileRefused int64
	// RingFallbacks counts io_uring reads that failed for the ring's own
	// reasons and were done again with pread.
	RingFallbacks int64
	// ResidencyProbes counts the spans of EngineIOUring bodies probed for
	// residency, each a few system calls: tests see which bodies need
	// none.
	ResidencyProbes int64
	// ColdBodies counts the bodies (or ranges of one) that a request read
	// through the ring because the no-wait read or a residency probe found
	// their data outside the page cache: requests that waited for the disk
	// (a sender with RingOnly, which asks neither, counts none), and
	// LastColdBody is when the last of them was counted (UnixNano, 0 for
	// none). The warm-up of the hot set reads at full width while they
	// are recent (prewarm.Warmer.Cold).
	ColdBodies, LastColdBody int64
	// RingFirstBodies counts the small bodies whose first read was the
	// ring's, with a no-wait half in its submission, rather than a no-wait
	// read of their own: while most first reads meet the disk (a cold tree).
	RingFirstBodies int64
}

// stats are the counters behind Snapshot: atomics, because every body
// updates them.
var stats struct {
	sendfileBytes, sendfileCalls, fallbacks, refused, ringFallbacks, residencyProbes, coldBodies, lastColdBody, ringFirstBodies atomic.Int64
}

// coldBody counts a body that met the disk, and when.
func coldBody() {
	stats.coldBodies.Add(1)
	stats.lastColdBody.Store(time.Now().UnixNano())
}

// Snapshot reads the counters now.
func Snapshot() Stats {
	return Stats{
		SendfileBytes:     stats.sendfileBytes.Load(),
		SendfileCalls:     stats.sendfileCalls.Load(),
		SendfileFallbacks: stats.fallbacks.Load(),
		SendfileRefused:   stats.refused.Load(),
		RingFallbacks:     stats.ringFallbacks.Load(),
		ResidencyProbes:   stats.residencyProbes.Load(),
		ColdBodies:        stats.coldBodies.Load(),
		LastColdBody:      stats.lastColdBody.Load(),
		RingFirstBodies:   stats.ringFirstBodies.Load(),
	}
}

// Open sets the sender up for its Policy (auto if empty): with a
// reference to the process's io_uring where the policy may use it, which
// Close gives back.
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
func (s *Sender) Choose(w http.ResponseWriter, r *http.Request, body Body) Transfer {
	if body.Data() != nil && s.Policy == PolicyAuto {
		return Transfer{Engine: EngineMemory}
	}
	if s.Ring != nil && body.FD() >= 0 && (!body.InMemoryFS() || s.Policy == PolicyIOUring) {
		t := Transfer{Engine: EngineIOUring}
		// A small body is not probed here: its one RWF_NOWAIT read is the
		// probe and the read at once.
		if s.Policy == PolicyIOUring || (!body.RecentlyResident() && (body.Size() <= NoWaitMax || !probeWhole(body, &t))) {
			return t
		}
	}
	if s.Policy != PolicyCopy && canSendfile(w, r, body) {
		return Transfer{Engine: EngineSendfile}
	}
	return Transfer{Engine: EngineCopy}
}

// canSendfile reports whether the response may be handed to the writer
// chain for sendfile: cleartext HTTP/1.x, a writer with ReadFrom, a file.
func canSendfile(w http.ResponseWriter, r *http.Request, body Body) bool {
	_, ok := w.(io.ReaderFrom)
	return ok && r.ProtoMajor == 1 && r.TLS == nil && body.FD() >= 0
}

// wholeProbeMax is the largest file probed whole (mincore's vector is a
// byte per page); larger files are probed span by span as they are sent.
const wholeProbeMax = 1 << 30

// probeWhole looks for the whole body in the page cache, at most once a
// second per file, and reports whether it is all there: a hot file then
// leaves without a probe per request. Where it is not, t learns where its
// data stops being there (Transfer.MissingAt).
func probeWhole(body Body, t *Transfer) bool {
	if body.Size() > wholeProbeMax || !body.ClaimProbe() {
		return false
	}
	off, ok := firstMissing(body)
	if !ok {
		return false
	}
	if off < body.Size() {
		t.MissingAt, t.MissingKnown = off, true
		return false
	}
	body.MarkResident()
	return true
}
