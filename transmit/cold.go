package transmit

import (
	"context"
	"errors"
	"io"
	"math/bits"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"

	"go.uber.org/zap"

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// coldChunk is the most bytes one ring read brings in (a window): large
// enough for the disk's queue, small enough to start writing soon.
const coldChunk = 256 << 10

var coldBufPool = sync.Pool{New: func() any { b := make([]byte, coldChunk); return &b }}

// coldBuf returns a buffer for a ring read of want bytes: a chunk, or for
// a small body one of its size class; putColdBuf gives it back.
func coldBuf(want int64) *[]byte {
	if want <= noWaitMax {
		return smallBuf(want)
	}
	return coldBufPool.Get().(*[]byte)
}

func putColdBuf(bufp *[]byte) {
	if cap(*bufp) < coldChunk {
		putSmallBuf(bufp)
		return
	}
	coldBufPool.Put(bufp)
}

// smallBufPools hold the buffers of small bodies by size class, 4 KiB to
// noWaitMax: what a response waiting for its client holds is about its
// body's size, as with file_server's io.Copy buffer.
var smallBufPools [5]sync.Pool

// smallClass is the size class of n bytes, n <= noWaitMax.
func smallClass(n int64) int {
	if n <= 4<<10 {
		return 0
	}
	return bits.Len64(uint64(n-1)) - 12
}

func smallBuf(n int64) *[]byte {
	c := smallClass(n)
	if b, ok := smallBufPools[c].Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 4<<10<<c)
	return &b
}

func putSmallBuf(bufp *[]byte) {
	smallBufPools[smallClass(int64(cap(*bufp)))].Put(bufp)
}

// coldBudget bounds the memory of ring reads: a read takes a token for
// its buffer once it has its turn and gives it back when it completes,
// before any byte is written to the client (a read let go of keeps it
// until the kernel is done). A client that does not read holds no token.
var coldBudget = make(chan struct{}, 64<<20/coldChunk)

// noWaitMax is the largest EngineIOUring body read with one no-wait read
// (preadv2 RWF_NOWAIT) instead of a residency probe: copying it costs less
// than the probe's extra system calls and its mmap lock.
const noWaitMax = 64 << 10

// firstReads chooses how the first read of a small body not known to be
// resident is made, from how the recent ones went. While most found the
// page cache warm, a no-wait read is the probe and the read at once, the
// cheapest read of a warm body. While most found it cold, each such read
// signalled the disk on its own (on a VM an exit to the host, a large part
// of a cold tree's CPU: bench/RESULTS.md), so the body is read through the
// ring at once, with a no-wait half in the batched submission
// (readOptions.NoWaitFirst), which tells the cold ones apart just as well.
type firstReads struct {
	// score moves up for a first read that met the disk, down for one that
	// did not, within [0, firstReadsMax]; lost concurrent steps do not
	// matter. A plain int32 with sync/atomic's functions: the module value
	// holding the Sender is copied before it is provisioned.
	score int32
}

const (
	firstReadsMax  = 32
	firstReadsRing = 16
)

func (f *firstReads) ringFirst() bool { return atomic.LoadInt32(&f.score) >= firstReadsRing }

func (f *firstReads) saw(cold bool) {
	switch v := atomic.LoadInt32(&f.score); {
	case cold && v < firstReadsMax:
		atomic.CompareAndSwapInt32(&f.score, v, v+1)
	case !cold && v > 0:
		atomic.CompareAndSwapInt32(&f.score, v, v-1)
	}
}

// coldRead is one ring read's share of the budget: a token, its buffer,
// and the body's file, which the ring holds if the read is let go of.
type coldRead struct {
	file  Body
	bufp  *[]byte
	token bool // a token of coldBudget is taken for the read
	lent  bool // the ring has the buffer, the token and a reference on file
}

// hold is readOptions.Hold: the ring owns the buffer, the token and a
// reference on the file until the kernel completes the read.
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

// borrow takes a token, waiting while the budget is spent, and a buffer.
func (c *coldRead) borrow(ctx context.Context, want int64) error {
	select {
	case coldBudget <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.bufp, c.token, c.lent = coldBuf(want), true, false
	return nil
}

// readDone gives the token back once the read has completed: what is done
// with its bytes after is the response's business, not the budget's.
func (c *coldRead) readDone() {
	if c.token && !c.lent {
		<-coldBudget
	}
	c.token = false
}

// giveBack returns the token and the buffer, unless the ring has them.
func (c *coldRead) giveBack() {
	c.readDone()
	if c.bufp != nil && !c.lent {
		putColdBuf(c.bufp)
	}
	c.bufp = nil
}

// ringRead reads want bytes of src at off through the ring into a buffer
// of the budget, borrowed once the read has its turn, and gives the token
// back once the read is done. It returns the buffer for the caller to give
// back (c.giveBack); nil when the request ended or no budget could be had.
// A read the ring failed is done again with pread (eng EngineCopy); err is
// a *ReadError when the file ended or failed after n bytes.
func (s *Sender) ringRead(ctx context.Context, src Body, opts *readOptions, c *coldRead, off, want int64) (buf []byte, n int, eng Engine, err error) {
	fd := src.FD()
	c.file = src
	opts.Hold = c.hold
	eng = EngineIOUring
	buf, n, err = s.Ring.readLent(ctx, fd, off, opts, func(ctx context.Context) ([]byte, error) {
		if err := c.borrow(ctx, want); err != nil {
			return nil, err
		}
		return (*c.bufp)[:want], nil
	})
	opts.Hold = nil
	if c.lent {
		c.bufp = nil // the ring's until the kernel completes the read
		if ctx.Err() != nil || !errors.Is(err, errRingClosed) {
			return nil, 0, eng, err // the request went away
		}
		// The ring closed under a live request (a reload gave the last
		// reference back): pread into a buffer of the request's own.
		if err := c.borrow(ctx, want); err != nil {
			return nil, 0, eng, err
		}
		buf, n = (*c.bufp)[:want], 0
	}
	if err != nil && ctx.Err() != nil {
		c.giveBack()
		return nil, 0, eng, err
	}
	if buf == nil {
		// The ring failed before lending was asked for (closed).
		if err := c.borrow(ctx, want); err != nil {
			return nil, 0, eng, err
		}
		buf = (*c.bufp)[:want]
	}
	if m, perr, redone := preadIfRingFailed(ctx, fd, buf, off, n, err); redone {
		s.Logger.Debug("io_uring read failed; reading with pread", zap.Error(err))
		n, err, eng = m, perr, EngineCopy
	}
	c.readDone()
	if err := pagecache.ShortRead(n, len(buf), err); err != nil {
		// The read went on after short reads: only a read of 0 bytes
		// before the end stops it, and that is truncation.
		return buf, n, eng, &ReadError{Offset: off + int64(n), Err: err}
	}
	return buf, n, eng, nil
}

// noWaitByte asks the page cache for fd's byte at off without waiting:
// cached if it is there; works if the page cache can be asked at all (not
// on FUSE, whose direct I/O may keep no page).
func noWaitByte(fd int, off int64) (cached, works bool) {
	var b [1]byte
	n, err := pagecache.ReadNoWait(fd, b[:], off)
	return n == 1 && err == nil, err == nil || errors.Is(err, syscall.EAGAIN)
}

func cached(fd int, off int64) bool { c, _ := noWaitByte(fd, off); return c }

// copyCached writes up to n bytes of fd from off to w through buf, with
// no-wait reads, and stops at the first byte not in the page cache
// (missing), which the caller reads through the ring, so that a page
// evicted since the ring read it holds no thread.
func copyCached(w io.Writer, fd int, buf []byte, off, n int64) (sent int64, missing bool, err error) {
	for sent < n {
		chunk := buf[:min(int64(len(buf)), n-sent)]
		k, rerr := pagecache.ReadNoWait(fd, chunk, off+sent)
		if k > 0 {
			m, werr := w.Write(chunk[:k])
			sent += int64(m)
			if werr != nil {
				return sent, false, werr
			}
			continue
		}
		if rerr == nil {
			return sent, false, &ReadError{Offset: off + sent, Err: errTruncated}
		}
		// Not in the page cache (EAGAIN), or not to be asked: the ring
		// reads it, and says if the file failed.
		return sent, true, nil
	}
	return sent, false, nil
}

// sendThroughRing sends a body some of whose data may be missing from the
// page cache. Resident runs leave as without io_uring (sendResident); the
// rest is read through the ring, so that the goroutine parks while the
// disk answers instead of holding an OS thread (readCold).
//
// Nothing shared is held across a write to the client, which may take as
// long as it likes: a ring read's budget token goes back when the read
// completes. A small rest is read into a buffer of its own size and
// written from it; a larger one a window at a time, whose first bytes are
// copied out and written and whose rest leaves from the page cache, where
// the ring read has just put it (sendWindow). A file whose page cache
// cannot be asked (FUSE) is read in pieces, each written from its buffer.
func (s *Sender) sendThroughRing(w http.ResponseWriter, r *http.Request, src Body, t *Transfer, start, length int64) (Counts, error) {
	rs := ringSend{s: s, w: w, r: r, ctx: r.Context(), src: src, t: t, fd: src.FD(),
		sendfile: canSendfile(w, r, src), probe: newProbe(src),
		opts: readOptions{NoBlockDevice: src.NoBlockDevice(), File: src.FileID()}}
	// The copy buffer is taken for each copy and given back after its
	// write, never kept across other writes: that would double what a
	// client that does not read holds.
	rs.copyPool, rs.pieceMax = copyPool(r)
	if done, err := rs.firstRead(start, length); done {
		return rs.sent, err
	}
	if !rs.sendfile && s.Copied != nil && sendfileBuilt && length > sniffLen && handedDown(w, r, src) {
		// What is resident is copied, not sent with sendfile, for want of
		// the wrapper: the handler says so once.
		s.Copied(r)
	}
	for rs.done < length {
		off := start + rs.done
		var err error
		switch {
		case off < rs.windowEnd:
			err = rs.sendWindow(off)
		case rs.windowErr != nil:
			return rs.sent, rs.windowErr
		default:
			var sent bool
			if sent, err = rs.sendResident(off, length-rs.done); !sent && err == nil {
				err = rs.readCold(off, length-rs.done)
			}
		}
		if err != nil {
			return rs.sent, err
		}
	}
	if rs.windowErr != nil {
		return rs.sent, rs.windowErr
	}
	if start == 0 && length == src.Size() {
		// All of it was resident or has just been read: it is now.
		src.MarkResident()
	}
	return rs.sent, nil
}

// ringSend is one sendThroughRing call's state.
type ringSend struct {
	s        *Sender
	w        http.ResponseWriter
	r        *http.Request
	ctx      context.Context // ring reads end with the request
	src      Body
	t        *Transfer
	fd       int
	sendfile bool
	probe    pagecache.Probe
	opts     readOptions
	copyPool *sync.Pool
	pieceMax int64

	sent Counts
	done int64
	// missing: a no-wait read found the next page missing, which answers
	// the residency probe's question, so the next read goes to the ring.
	missing   bool
	counted   bool // counted as a body that met the disk (coldBody)
	ringFirst bool // the first read is the ring's, with a no-wait half
	// pieces: the page cache cannot be asked (FUSE), so ring reads are of
	// pieceMax, each written from its buffer; asked: that is known.
	pieces, asked bool
	// The bytes up to windowEnd were read by the ring (windowEng) and
	// leave from the page cache; windowErr is where that read stopped.
	windowEnd int64
	windowEng Engine
	windowErr error
}

func (rs *ringSend) countCold() {
	if !rs.counted {
		rs.counted = true
		coldBody()
	}
}

// firstRead makes the first read of a small body and reports whether it
// sent the whole body. Unless the ring goes first (firstReads), it is one
// read that takes only what the page cache holds: it answers the
// residency question and reads the data at once. A cold small body is
// then read through the ring rather than with a blocking pread, which
// would keep its P until the runtime hands it off.
func (rs *ringSend) firstRead(start, length int64) (bool, error) {
	s, src := rs.s, rs.src
	switch {
	case s.ringOnly() || length > noWaitMax:
		return false, nil
	case s.firstReads.ringFirst() && s.Ring.NoWaitFirst() && !src.NoBlockDevice():
		rs.ringFirst = true
		stats.ringFirstBodies.Add(1)
		return false, nil
	}
	bufp := smallBuf(length)
	buf := (*bufp)[:length]
	n, diskRead, err := pagecache.ReadNoWaitMetDisk(rs.fd, buf, start)
	// The disk read it started was for this body's own pages when it came
	// back short or the body ends the file; otherwise it may be only the
	// kernel's readahead of what follows, which nobody waits for.
	if diskRead && (n < len(buf) || start+length == src.Size()) {
		rs.countCold()
	}
	if err == nil && n == len(buf) {
		s.firstReads.saw(rs.counted)
		k, err := rs.w.Write(buf)
		putSmallBuf(bufp)
		rs.sent[EngineCopy] = int64(k)
		rs.t.Engine = EngineCopy // the ring had nothing to do
		if err == nil && start == 0 && length == src.Size() {
			src.MarkResident()
		}
		return true, err
	}
	// Given back now rather than held, unused, while the long way's write
	// waits for the client.
	putSmallBuf(bufp)
	rs.missing = n == 0 && errors.Is(err, syscall.EAGAIN)
	if rs.missing {
		s.firstReads.saw(true)
	}
	return false, nil
}

// sendWindow sends the rest of the window the ring just read from off,
// from the page cache.
func (rs *ringSend) sendWindow(off int64) error {
	var n int64
	var err error
	gone := false
	if rs.sendfile {
		n, _, err = rs.s.sendFile(rs.w, rs.r, rs.src, rs.t.ContentLength, off, rs.windowEnd-off)
	} else {
		bp := rs.copyPool.Get().(*[]byte)
		n, gone, err = copyCached(rs.w, rs.fd, *bp, off, rs.windowEnd-off)
		rs.copyPool.Put(bp)
	}
	rs.done += n
	rs.sent[rs.windowEng] += n
	if gone {
		// Evicted since the ring read it: the ring reads it again.
		rs.windowEnd, rs.missing = 0, true
	}
	return err
}

// sendResident probes the span from off and sends what of it is resident,
// reporting whether it sent anything; a span known to be cold counts the
// body as one that met the disk.
func (rs *ringSend) sendResident(off, left int64) (bool, error) {
	span := min(left, residencyProbe)
	knownCold := rs.missing
	if t := rs.t; t.missingKnown && !rs.missing {
		// What the handler's probe has just found missing is not asked
		// again (Transfer.missingAt); what comes before it is.
		switch {
		case off >= t.missingAt && off < t.missingAt+residencyProbe:
			knownCold, t.missingKnown = true, false
		case off < t.missingAt && t.missingAt < off+span:
			span = t.missingAt - off
		}
	}
	if !rs.s.ringOnly() && !knownCold && !rs.ringFirst {
		stats.residencyProbes.Add(1)
		resident, err := rs.probe.Resident(off, span)
		knownCold = err == nil && resident == 0
		if err == nil && resident > 0 {
			var n int64
			if rs.sendfile {
				var zeroCopy bool
				n, zeroCopy, err = rs.s.sendFile(rs.w, rs.r, rs.src, rs.t.ContentLength, off, resident)
				if zeroCopy {
					rs.sent[EngineSendfile] += n
				} else {
					rs.sent[EngineCopy] += n
				}
			} else {
				n, err = copyWith(rs.copyPool, rs.w, rs.src.File(), off, resident)
				rs.sent[EngineCopy] += n
			}
			rs.done += n
			return true, err
		}
	}
	if knownCold {
		rs.countCold()
	}
	rs.missing = false // past this read, probe again
	return false, nil
}

// readCold reads from off through the ring and writes what it read: a
// small rest or a piece from its own buffer, a window's first bytes from
// the response's copy buffer (the rest of the window then leaves from the
// page cache, sendWindow).
func (rs *ringSend) readCold(off, left int64) error {
	want, direct := min(left, coldChunk), left <= noWaitMax
	if !direct && !rs.asked {
		rs.asked = true
		_, works := noWaitByte(rs.fd, off)
		rs.pieces = !works
	}
	if rs.pieces {
		want, direct = min(left, rs.pieceMax), true
	}
	rs.opts.NoWaitFirst = rs.ringFirst
	var cold coldRead
	buf, n, eng, err := rs.s.ringRead(rs.ctx, rs.src, &rs.opts, &cold, off, want)
	if rs.ringFirst {
		// Its no-wait half said whether the data was in the page cache.
		rs.ringFirst = false
		rs.s.firstReads.saw(rs.opts.MetDisk)
		if rs.opts.MetDisk {
			rs.countCold()
		}
	}
	if buf == nil {
		return err
	}
	if direct {
		var k int
		var werr error
		if n > 0 {
			k, werr = rs.w.Write(buf[:n])
		}
		cold.giveBack()
		rs.done += int64(k)
		rs.sent[eng] += int64(k)
		if werr != nil {
			return werr
		}
		return err
	}
	rs.windowEnd, rs.windowEng, rs.windowErr = off+int64(n), eng, err
	if rs.sendfile && (n == 0 || cached(rs.fd, off+int64(n)-1)) {
		// The whole window leaves by sendfile, from the page cache.
		cold.giveBack()
		return nil
	}
	// Its first bytes are written from the response's own buffer, so that
	// every window makes progress; the rest leaves from the page cache,
	// or (not there, for sendfile) is read again in pieces.
	bp := rs.copyPool.Get().(*[]byte)
	k := copy(*bp, buf[:n])
	cold.giveBack()
	if rs.sendfile {
		rs.pieces, rs.windowEnd = true, off+int64(k)
	}
	var m int
	var werr error
	if k > 0 {
		m, werr = rs.w.Write((*bp)[:k])
	}
	rs.copyPool.Put(bp)
	rs.done += int64(m)
	rs.sent[eng] += int64(m)
	return werr
}

// preadIfRingFailed is the one fallback of ring reads, for bodies and
// prewarm: a read that failed for the ring's own reasons (ringFault) is
// done again, whole, with pread, and redone says so. A failure of the file
// is returned as it is: pread would meet the same disk error, holding a
// thread; and an ended request wants no bytes at all.
func preadIfRingFailed(ctx context.Context, fd int, buf []byte, off int64, n int, err error) (int, error, bool) {
	if err == nil || ctx.Err() != nil || !ringFault(err) {
		return n, err, false
	}
	stats.ringFallbacks.Add(1)
	m, err := preadFull(fd, buf, off)
	return m, err, true
}

// ringFault reports whether a failed ring read is the ring's failure
// (closed, cancelled, refused, out of memory) rather than the file's.
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
