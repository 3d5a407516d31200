package transmit

import (
	"sync/atomic"
	"time"
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
