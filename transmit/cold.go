package transmit

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"

	"go.uber.org/zap"

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// coldChunk is the most bytes one io_uring read brings in: large enough
// for the disk's queue, small enough to start writing soon.
const coldChunk = 256 << 10

var coldBufPool = sync.Pool{New: func() any { b := make([]byte, coldChunk); return &b }}

// coldBuf returns a chunk for a ring read of want bytes: one of NoWaitMax
// from the no-wait reads' pool when that holds it, so that a small body's
// read does not take a chunk of coldChunk (64 connections reading cold
// 8 KiB files kept 18 MiB of them in the pool, 256 KiB for each 8 KiB
// body); putColdBuf gives it back to its pool.
func coldBuf(want int64) *[]byte {
	if want <= NoWaitMax {
		return noWaitBufPool.Get().(*[]byte)
	}
	return coldBufPool.Get().(*[]byte)
}

func putColdBuf(bufp *[]byte) {
	if cap(*bufp) < coldChunk {
		noWaitBufPool.Put(bufp)
		return
	}
	coldBufPool.Put(bufp)
}

// coldBudget lends the chunks of ring reads, one token per coldChunk: at
// most 64 MiB of them exist in the process at once, however many slow
// clients there are. A chunk is borrowed for one read and its write, and
// one that a read left to the ring comes back with the read's completion.
var coldBudget = make(chan struct{}, 64<<20/coldChunk)

// NoWaitMax is the largest EngineIOUring body read with one no-wait read
// (preadv2 with RWF_NOWAIT) instead of a residency probe: copying it
// costs less than the probe's two extra system calls and its mmap lock.
// The handler's policy therefore sends such a body to the ring's engine
// unprobed: that one read is the probe and the read at once.
const NoWaitMax = 64 << 10

// firstReads chooses how the first read of a small body not known to be
// resident is made, from how the recent ones went. While most found the
// page cache warm, a no-wait read (preadv2 with RWF_NOWAIT) is the probe
// and the read at once, the cheapest read of a warm body (e's files).
// While most found it cold, each such read started its disk read in its
// own call, and so signalled the disk on its own (on a VM, an exit to the
// host: 17 % of the CPU of a cold tree of 8 KiB files); the body is then
// read through the ring at once, with a no-wait half in the same batched
// submission (readOptions.NoWaitFirst), which tells the cold ones as the
// no-wait read did and starts their disk reads together. Both ways see
// whether a first read met the disk, so the choice follows the tree.
type firstReads struct {
	// score goes up by one for a first read that met the disk and down by
	// one for one that did not, within [0, firstReadsMax]; the ring goes
	// first from firstReadsRing up. The updates may lose a step to a
	// concurrent one: it is a trend, not a count. A plain int32 read and
	// written with sync/atomic's functions: the handler's module value,
	// which holds the Sender, is copied before it is provisioned.
	score int32
}

const (
	firstReadsMax  = 32
	firstReadsRing = 16
)

// ringFirst reports whether most recent first reads met the disk.
func (f *firstReads) ringFirst() bool { return atomic.LoadInt32(&f.score) >= firstReadsRing }

// saw records how a first read went.
func (f *firstReads) saw(cold bool) {
	switch v := atomic.LoadInt32(&f.score); {
	case cold && v < firstReadsMax:
		atomic.CompareAndSwapInt32(&f.score, v, v+1)
	case !cold && v > 0:
		atomic.CompareAndSwapInt32(&f.score, v, v-1)
	}
}

// noWaitBufPool backs the one no-wait read of a small body.
var noWaitBufPool = sync.Pool{New: func() any { b := make([]byte, NoWaitMax); return &b }}

// coldRead is what a ring read the request lets go of must keep: the
// body's descriptor (a reference on its open file) and the chunk it
// reads into.
type coldRead struct {
	file Body
	bufp *[]byte
	lent bool
}

// hold is readOptions.Hold: the ring owns the chunk and a reference on
// the open file until the kernel completes the read.
func (c *coldRead) hold() func() {
	c.file.Hold()
	file, bufp := c.file, c.bufp
	c.lent = true
	return func() {
		file.Release()
		putColdBuf(bufp)
		<-coldBudget
	}
}

// borrow takes a chunk of at least want bytes from the budget, waiting
// while it is spent.
func (c *coldRead) borrow(ctx context.Context, want int64) error {
	select {
	case coldBudget <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.bufp, c.lent = coldBuf(want), false
	return nil
}

// giveBack returns a chunk that is not lent to the ring.
func (c *coldRead) giveBack() {
	if c.bufp != nil && !c.lent {
		putColdBuf(c.bufp)
		<-coldBudget
	}
	c.bufp = nil
}

// sendThroughRing sends a body of which some data may be missing from the
// page cache. Resident runs leave as they would without io_uring (sendfile
// on cleartext HTTP/1.x, pread otherwise); the rest is read through the
// ring, so that the goroutine parks while the disk answers instead of
// holding an OS thread in a blocking read. With RingOnly every byte is
// read through the ring.
func (s *Sender) sendThroughRing(w http.ResponseWriter, r *http.Request, src Body, t *Transfer, start, length int64) (Counts, error) {
	var sent Counts
	file, fd := src.File(), src.FD()
	sendfile := canSendfile(w, r, src)
	// Ring reads end with the request: a client that leaves, a cancelled
	// context or an unloaded config lets go of a read a stalled device
	// holds.
	ctx := r.Context()
	var cold coldRead
	var opts readOptions
	var done int64
	probe := newProbe(src)
	// missing is set when the no-wait read below found the first page
	// missing: that answers what a residency probe would ask (the kernel
	// has also started reading it ahead), so the first chunk goes to the
	// ring without the probe's mmap, mincore and munmap (about 6 % of the
	// CPU on a cold tree of 8 KiB files).
	//
	// A cold small body is read here, through the ring, rather than by
	// the miss that opened the file with a blocking pread while it holds
	// its slot, as nginx's aio thread would: a goroutine blocked in a read
	// keeps its P until the runtime hands it off, and with the server on
	// one CPU every other request waits meanwhile. Measured on 100,000
	// files of 8 KiB with their data evicted, 200 connections, the server
	// on one CPU, 10 interleaved pairs: 9.5 instead of 13.7 syscalls per
	// request, but 0.41x the requests per second and 18 % more CPU per
	// request (medians).
	missing := false
	// counted is set once this body is counted as one that met the disk
	// (coldBody): the no-wait read or a probe found its data missing.
	counted := false
	// ringFirst: this small body's first read is the ring's, with a
	// no-wait half (firstReads).
	ringFirst := false
	switch {
	case s.RingOnly || length > NoWaitMax:
	case s.firstReads.ringFirst() && s.Ring.NoWaitFirst() && !src.NoBlockDevice():
		ringFirst = true
		stats.ringFirstBodies.Add(1)
	default:
		// A small body: one read that takes only what the page cache holds
		// answers the residency question and reads the data at once. What
		// it cannot take whole goes the long way below.
		bufp := noWaitBufPool.Get().(*[]byte)
		defer noWaitBufPool.Put(bufp)
		buf := (*bufp)[:length]
		n, diskRead, err := pagecache.ReadNoWaitMetDisk(fd, buf, start)
		// The disk read the no-wait read submitted was for this body's own
		// pages when the read came back short (it stopped at the first one
		// missing) or when the body ends the file (there is nothing after
		// it to read ahead). After a whole range inside the file it may be
		// only the kernel's readahead of what follows, which nobody waits
		// for: not counted.
		if diskRead && (n < len(buf) || start+length == src.Size()) {
			counted = true
			coldBody()
		}
		if err == nil && n == len(buf) {
			s.firstReads.saw(counted)
			k, err := w.Write(buf)
			sent[EngineCopy] = int64(k)
			t.Engine = EngineCopy // the ring had nothing to do
			if err == nil && start == 0 && length == src.Size() {
				src.MarkResident()
			}
			return sent, err
		}
		missing = n == 0 && errors.Is(err, syscall.EAGAIN)
		if missing {
			s.firstReads.saw(true)
		}
	}
	for done < length {
		off := start + done
		span := min(length-done, residencyProbe)
		knownCold := missing
		if t.MissingKnown && !missing {
			// What the handler's probe has just found missing is not asked
			// again (Transfer.MissingAt); what comes before it is.
			switch {
			case off >= t.MissingAt && off < t.MissingAt+residencyProbe:
				knownCold, t.MissingKnown = true, false
			case off < t.MissingAt && t.MissingAt < off+span:
				span = t.MissingAt - off
			}
		}
		if !s.RingOnly && !knownCold && !ringFirst {
			stats.residencyProbes.Add(1)
			resident, err := probe.Resident(off, span)
			knownCold = err == nil && resident == 0
			if err == nil && resident > 0 {
				var n int64
				if sendfile {
					var zeroCopy bool
					n, zeroCopy, err = s.sendFile(w, r, src, off, resident)
					if zeroCopy {
						sent[EngineSendfile] += n
					} else {
						sent[EngineCopy] += n
					}
				} else {
					n, err = copyRange(w, file, off, resident)
					sent[EngineCopy] += n
				}
				done += n
				if err != nil {
					return sent, err
				}
				continue
			}
		}
		if knownCold && !counted {
			counted = true
			coldBody()
		}
		if cold.file == nil {
			cold.file = src
			opts.Hold = cold.hold
			opts.NoBlockDevice = src.NoBlockDevice()
			opts.File = src.FileID()
			defer cold.giveBack()
		}
		missing = false // past the first chunk, probe again
		opts.NoWaitFirst = ringFirst
		want := min(coldChunk, length-done)
		eng := EngineIOUring
		// The chunk is borrowed once the read has its turn, so that the
		// readers of a stalled file, waiting for it, hold none.
		buf, n, err := s.Ring.readLent(ctx, fd, off, &opts, func(ctx context.Context) ([]byte, error) {
			if err := cold.borrow(ctx, want); err != nil {
				return nil, err
			}
			return (*cold.bufp)[:want], nil
		})
		if ringFirst {
			// Its no-wait half said whether the data was in the page cache.
			ringFirst = false
			s.firstReads.saw(opts.MetDisk)
			if opts.MetDisk && !counted {
				counted = true
				coldBody()
			}
		}
		if cold.lent {
			// The read was let go of while in the kernel: the chunk and a
			// reference on the descriptor are the ring's until it
			// completes.
			cold.bufp = nil
			if ctx.Err() != nil || !errors.Is(err, errRingClosed) {
				return sent, err // the request went away
			}
			// The ring closed under a request that is still there (a
			// reload whose config holds no ring gave the last reference
			// back): the chunk is read again with pread, into one of the
			// request's own, and the response goes on.
			if err := cold.borrow(ctx, want); err != nil {
				return sent, err
			}
			buf, n = (*cold.bufp)[:want], 0
		}
		if err != nil && ctx.Err() != nil {
			return sent, err
		}
		if buf == nil {
			// The ring failed before lending was asked for (closed).
			if err := cold.borrow(ctx, want); err != nil {
				return sent, err
			}
			buf = (*cold.bufp)[:want]
		}
		if m, perr, redone := preadIfRingFailed(ctx, fd, buf, off, n, err); redone {
			// The ring failed, not the disk: this read went on with pread,
			// and the response does not notice.
			s.Logger.Debug("io_uring read failed; reading with pread", zap.Error(err))
			n, err, eng = m, perr, EngineCopy
		}
		if err := pagecache.ShortRead(n, len(buf), err); err != nil {
			// The read went on after short reads: only a read of 0 bytes
			// before the end stops it, and that is truncation.
			if n > 0 {
				// What is left is still sent, and counted: the
				// connection is aborted after it.
				k, _ := w.Write(buf[:n])
				done += int64(k)
				sent[eng] += int64(k)
			}
			cold.giveBack()
			return sent, &ReadError{Offset: off + int64(n), Err: err}
		}
		k, err := w.Write(buf)
		cold.giveBack()
		done += int64(k)
		sent[eng] += int64(k)
		if err != nil {
			return sent, err
		}
	}
	if start == 0 && length == src.Size() {
		// All of it was resident or has just been read: it is now.
		src.MarkResident()
	}
	return sent, nil
}

// preadIfRingFailed is the one fallback of ring reads, for the bodies
// and for prewarm: a read that failed for the ring's own reasons
// (ringFault: the ring was closed under it, the kernel cancelled it or
// had no memory for it) is done again, whole, with pread, and redone
// says so. A failure of the file is returned as it is (n, err): pread
// would meet the same disk error, holding an OS thread while it does,
// which is what the ring is there to avoid; and an ended request (ctx's
// error) wants no bytes at all. A short count from pread, with a nil
// error, is the end of the file.
func preadIfRingFailed(ctx context.Context, fd int, buf []byte, off int64, n int, err error) (int, error, bool) {
	if err == nil || ctx.Err() != nil || !ringFault(err) {
		return n, err, false
	}
	stats.ringFallbacks.Add(1)
	m, err := preadFull(fd, buf, off)
	return m, err, true
}

// ringFault reports whether a failed ring read is the ring's failure (it
// was closed, cancelled, refused or out of memory) rather than the file's,
// so that pread may do it instead.
func ringFault(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false // the request's end, not the ring's
	}
	if errors.Is(err, errRingClosed) {
		return true
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return true
	}
	switch errno {
	case syscall.ECANCELED, syscall.EAGAIN, syscall.EINTR, syscall.ENOMEM, syscall.EINVAL,
		syscall.EOPNOTSUPP, syscall.EBUSY, syscall.EBADF:
		return true
	}
	return false
}
