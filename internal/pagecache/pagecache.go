// Package pagecache asks the kernel's page cache about open files: which
// of their bytes are resident (mincore, where it tells this process the
// truth; reads that never wait, elsewhere), reads that take only what is
// resident, and readahead control; and it holds the one rule for a read
// that came back short. statacc, transmit and prewarm use it, so that each
// of these system calls is wrapped once.
//
// Only Linux has these calls. Elsewhere, and in the flashserve_portable
// build, Supported is false, the residency probes and no-wait reads fail
// with an error that wraps errors.ErrUnsupported and Prefetch does nothing;
// ShortRead and ErrTruncated are the same everywhere.
package pagecache

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"
)

var pageSize = int64(os.Getpagesize())

// asked counts the residency questions put to the kernel, by kind
// (Asked).
var asked struct{ mincores, cachestats atomic.Int64 }

// Asked returns how many mincore(2) probes (each an mmap, a mincore and
// a munmap) and cachestat(2) calls the process has made so far: the tests
// see which bodies cost a probe of which kind.
func Asked() (mincores, cachestats int64) {
	return asked.mincores.Load(), asked.cachestats.Load()
}

// ErrTruncated is the cause of a read that ended before the bytes it was
// asked for without an error: the file is shorter than when it was
// measured (truncated while being read).
var ErrTruncated = errors.New("file is shorter than when the response started")

// errUnsupported is what the probes and reads answer where the page cache
// cannot be asked.
var errUnsupported = fmt.Errorf("page-cache residency is only known on Linux: %w", errors.ErrUnsupported)

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
// With mincore, one probe looks 64 MiB ahead and its answer is used for
// the spans that follow it for 250 ms, so that a body sent chunk after
// chunk costs one probe per 64 MiB, not one per chunk: a cachestat(2),
// which answers alone when all of it is there, else an mmap, mincore and
// munmap.
// A page evicted within that time is not seen (the read or sendfile that
// meets it waits for the disk), as it would not be between a probe and the
// send that follows it.
//
// The no-wait reads have two limits: a missing page between two cached
// ends is not seen (the read that meets it waits for the disk), and a
// no-wait read of a missing page starts the kernel's readahead there, as
// the read that follows would.
type Probe struct {
	fd      int
	trusted bool
	// size is the file's size, 0 if unknown: a mincore looks no further
	// than the end of the file. Each page of the mapping is looked up,
	// past the end too, and on tmpfs a look 64 MiB ahead of an 8 KiB file
	// took about 0.6 ms.
	size int64
	// vec is the last mincore answer, one byte per page from vecStart
	// (bit 0 set for a resident page), asked at vecAt; buf holds it.
	vec, buf []byte
	vecStart int64
	vecAt    time.Time
	// small holds the answer of a probe of up to 16 pages, so that a
	// small file's probe allocates nothing.
	small    [16]byte
	smallLen int
	// allFrom and allTo bound the last look ahead that cachestat found
	// all in the page cache (allCached), asked at allAt: that answer
	// needs no vector, nor mincore.
	allFrom, allTo int64
	allAt          time.Time
}

// Probing ahead: how far one mincore of a Probe looks, and how long its
// answer stands.
const (
	probeAhead = 64 << 20
	probeFresh = 250 * time.Millisecond
)

// NewProbe returns a Probe of the open file fd of size bytes (0 if
// unknown); trusted says whether mincore tells this process the truth
// about it (Trusted, asked once when the file was opened).
func NewProbe(fd int, trusted bool, size int64) Probe {
	return Probe{fd: fd, trusted: trusted, size: size}
}

// Resident returns how many of the n bytes from off are in the page
// cache, counted from off: with mincore, up to the first missing page;
// without, n when both ends of the span are cached and 0 when either is
// not (or cannot be read without waiting: a file system without
// RWF_NOWAIT, the end of the file).
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
			// Past the end of the file the mapping has no pages: they count
			// as missing, and no caller asks for them.
			ahead = min(ahead, max(n, p.size-off))
		}
		if allCached(p.fd, off, ahead) {
			// The usual answer for hot data, in one system call; where a
			// page is missing, mincore says which.
			p.allFrom, p.allTo, p.allAt = off, off+ahead, time.Now()
			return n, nil
		}
		var start int64
		var err error
		if pages := ahead/pageSize + 2; pages <= int64(len(p.small)) {
			// The answer stays in small, kept as its length: a slice of the
			// Probe's own array would make every Probe escape to the heap.
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

// Whole reports whether the first size bytes of the file are all in the
// page cache (FirstMissing).
func (p *Probe) Whole(size, span int64) bool {
	off, ok := p.FirstMissing(size, span)
	return ok && off == size
}

// FirstMissing returns where the first size bytes of the file stop being
// in the page cache: size when they are all there; with mincore (one call
// over them), the first missing page; without, the start of the first
// span of span bytes with an end missing, the spans probed in turn. ok is
// false when mincore failed and nothing is known.
//
// Without mincore the answer is only good at once: the no-wait read that
// found a page missing has also started the kernel reading it, and a
// probe a moment later finds it there while the rest of its span is not.
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
// A no-wait read of a missing page starts the kernel reading it in, and
// on a fast device (a virtual disk over the host's cache, under load) that
// read can complete before the call looks again and returns the byte. The
// probe would then report a span resident whose middle is still on disk,
// for a sendfile that blocks on it: so a probe during which this thread
// submitted a disk read (blocksReadIn) counts the span missing, whatever the
// reads returned. So does one whose goroutine moved to another thread
// meanwhile, whose counts do not compare: it is not locked to one, which
// would hold a thread per waiting probe in a cold storm.
func (p *Probe) noWait(off, n int64) int64 {
	if n <= 0 {
		return 0
	}
	// Each end is read alone: a read that took the byte past the span too
	// (the next span's start, for one system call fewer) would count the
	// disk read it starts there against this span.
	before := blocksReadIn()
	var b [1]byte
	if k, err := ReadNoWait(p.fd, b[:], off); k != 1 || err != nil || blocksReadIn() != before {
		// A start that met the disk: the end is not read, which would start
		// another disk read there for nothing.
		return 0
	}
	if n > 1 {
		if k, err := ReadNoWait(p.fd, b[:], off+n-1); k != 1 || err != nil || blocksReadIn() != before {
			return 0
		}
	}
	return n
}
