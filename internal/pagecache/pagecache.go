// Package pagecache asks the kernel's page cache about open files: which
// of their bytes are resident (mincore where it tells this process the
// truth, no-wait reads elsewhere), reads that take only what is resident,
// and readahead control; and it holds the one rule for a read that came
// back short (ShortRead).
//
// Only Linux has these calls. Elsewhere, and in the flashserve_portable
// build, the probes and no-wait reads fail with an error that wraps
// errors.ErrUnsupported and the advice does nothing.
package pagecache

import (
	"errors"
	"io"
	"os"
	"sync/atomic"
	"time"
)

var pageSize = int64(os.Getpagesize())

// asked counts the residency questions put to the kernel (Asked).
var asked struct{ mincores, cachestats atomic.Int64 }

// Asked returns how many mincore(2) probes and cachestat(2) calls the
// process has made so far, for tests of which bodies cost a probe.
func Asked() (mincores, cachestats int64) {
	return asked.mincores.Load(), asked.cachestats.Load()
}

// ErrTruncated is the cause of a read that ended before the bytes it was
// asked for without an error: the file shrank while being read.
var ErrTruncated = errors.New("file is shorter than when the response started")

// ShortRead is the verdict on a read that asked for want bytes and got n
// with err: nil when all want bytes came (whatever err says: io.ReaderAt
// may return io.EOF with the last bytes), err when the read failed, and
// ErrTruncated when it stopped short without a failure (nil or io.EOF),
// which for a file whose size is known means that it shrank.
func ShortRead[N int | int64](n, want N, err error) error {
	switch {
	case n >= want:
		return nil
	case err == nil || errors.Is(err, io.EOF):
		return ErrTruncated
	}
	return err
}

// Probe finds, span after span of one open file, how much from an offset
// is in the page cache. mincore answers for files this process owns or
// may write (Trusted); for the others it lies, reporting every page
// resident, so their spans are probed with no-wait reads of a byte at
// each end, and a span with either end missing counts as not resident.
//
// With mincore, one probe looks probeAhead ahead and its answer stands
// for probeFresh, so that a body sent chunk after chunk costs one probe
// per 64 MiB, not one per chunk. A page evicted within that time is not
// seen, as it would not be between a probe and the send that follows it.
//
// The no-wait reads do not see a missing page between two cached ends,
// and a no-wait read of a missing page starts the kernel's readahead
// there, as the read that follows would.
type Probe struct {
	fd      int
	trusted bool
	// size is the file's size, 0 if unknown: a mincore looks no further
	// than the end of the file, since every page of the mapping is looked
	// up, past the end too.
	size int64
	// vec is the last mincore answer, one byte per page from vecStart,
	// asked at vecAt; buf holds it, or small (smallLen bytes) for a probe
	// of up to 16 pages, so that a small file's probe allocates nothing.
	vec, buf []byte
	vecStart int64
	vecAt    time.Time
	small    [16]byte
	smallLen int
	// allFrom and allTo bound the last look ahead that cachestat found
	// all cached (allCached), asked at allAt.
	allFrom, allTo int64
	allAt          time.Time
}

const (
	probeAhead = 64 << 20
	probeFresh = 250 * time.Millisecond
)

// NewProbe returns a Probe of the open file fd of size bytes (0 if
// unknown); trusted is Trusted's answer for it.
func NewProbe(fd int, trusted bool, size int64) Probe {
	return Probe{fd: fd, trusted: trusted, size: size}
}

// Resident returns how many of the n bytes from off are in the page
// cache, counted from off: with mincore, up to the first missing page;
// without, n when both ends of the span are cached (read without
// waiting) and 0 when either is not.
func (p *Probe) Resident(off, n int64) (int64, error) {
	if !p.trusted {
		return p.noWait(off, n), nil
	}
	if n <= 0 {
		return 0, nil
	}
	if off >= p.allFrom && off+n <= p.allTo && time.Since(p.allAt) <= probeFresh {
		return n, nil
	}
	if off < p.vecStart || off+n > p.vecStart+int64(len(p.answer()))*pageSize || time.Since(p.vecAt) > probeFresh {
		ahead := max(n, probeAhead)
		if p.size > off {
			ahead = min(ahead, max(n, p.size-off))
		}
		if allCached(p.fd, off, ahead) {
			p.allFrom, p.allTo, p.allAt = off, off+ahead, time.Now()
			return n, nil
		}
		var start int64
		var err error
		if pages := ahead/pageSize + 2; pages <= int64(len(p.small)) {
			// Kept as a length: a slice of the Probe's own array would make
			// every Probe escape to the heap.
			var vec []byte
			vec, start, err = mincore(p.fd, off, ahead, p.small[:])
			p.vec, p.smallLen = nil, len(vec)
		} else {
			if int64(len(p.buf)) < pages {
				p.buf = make([]byte, min(pages, probeAhead/pageSize+2))
			}
			p.vec, start, err = mincore(p.fd, off, ahead, p.buf)
			p.smallLen = 0
		}
		if err != nil {
			p.vec, p.smallLen = nil, 0
			return 0, err
		}
		p.vecStart, p.vecAt = start, time.Now()
	}
	return residentFrom(p.answer(), p.vecStart, off, n), nil
}

// answer is the last mincore answer.
func (p *Probe) answer() []byte {
	if p.smallLen > 0 {
		return p.small[:p.smallLen]
	}
	return p.vec
}

// residentFrom counts, in a mincore vector of the pages from start, the
// bytes from off that are resident, up to n and the first missing page.
func residentFrom(vec []byte, start, off, n int64) int64 {
	for i := (off - start) / pageSize; i < int64(len(vec)) && i*pageSize+start < off+n; i++ {
		if vec[i]&1 == 0 {
			return max(0, min(n, i*pageSize+start-off))
		}
	}
	return n
}

// FirstMissing returns where the first size bytes of the file stop being
// in the page cache: size when they are all there; with mincore, the
// first missing page; without, the start of the first span of span bytes
// with an end missing. ok is false when mincore failed.
//
// Without mincore the answer is only good at once: the no-wait read that
// found a page missing has also started the kernel reading it.
func (p *Probe) FirstMissing(size, span int64) (off int64, ok bool) {
	if p.trusted {
		n, err := residentPrefix(p.fd, 0, size)
		return n, err == nil
	}
	for off = 0; off < size; off += span {
		if p.noWait(off, min(span, size-off)) == 0 {
			return off, true
		}
	}
	return size, true
}

// noWait is Resident without mincore: n when the bytes at off and at
// off+n-1 are both cached, else 0.
//
// A no-wait read of a missing page starts the kernel reading it, and on a
// fast device that read can complete within the call, which then returns
// the byte: the span would count resident with its middle still on disk.
// So a probe during which this thread submitted a disk read
// (blocksReadIn) counts the span missing, as does one whose goroutine
// moved to another thread meanwhile (their counts do not compare); it is
// not locked to one, which would hold a thread per probe in a cold storm.
func (p *Probe) noWait(off, n int64) int64 {
	if n <= 0 {
		return 0
	}
	// Each end is read alone: a read that took the next span's first byte
	// too would count the disk read it starts there against this span.
	before := blocksReadIn()
	var b [1]byte
	if k, err := ReadNoWait(p.fd, b[:], off); k != 1 || err != nil || blocksReadIn() != before {
		// The end is not read: that would start another disk read for nothing.
		return 0
	}
	if n > 1 {
		if k, err := ReadNoWait(p.fd, b[:], off+n-1); k != 1 || err != nil || blocksReadIn() != before {
			return 0
		}
	}
	return n
}
