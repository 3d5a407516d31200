package transmit

import (
	"sync/atomic"
	"time"
)

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
	// residency.
	ResidencyProbes int64
	// ColdBodies counts the bodies (or ranges) whose data a no-wait read or
	// a probe found outside the page cache, which then waited for the disk
	// (the io_uring policy asks neither, so counts none); LastColdBody is
	// when the last was counted (UnixNano, 0 for none): the warm-up of the
	// hot set reads at full width while it is recent (prewarm.Warmer.Cold).
	ColdBodies, LastColdBody int64
	// RingFirstBodies counts the small bodies whose first read was the
	// ring's, with a no-wait half (firstReads).
	RingFirstBodies int64
}

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

// ColdBuffers reports the bytes of buffers that ring reads hold now (the
// cold budget's tokens taken) and the most they can hold.
func ColdBuffers() (inUse, limit int64) {
	return int64(len(coldBudget)) * coldChunk, int64(cap(coldBudget)) * coldChunk
}
