package flashserve

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"syscall"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
	"github.com/flashserve/caddy-flash-serve/statacc"
	"github.com/flashserve/caddy-flash-serve/transmit"
)

// rings holds the process's io_uring across config reloads, as caches
// holds the statacc caches.
var rings = caddy.NewUsagePool()

const ringKey = "io_uring"

// ringHolder is the shared ring, or why there is none.
type ringHolder struct {
	ring     *transmit.Ring
	err      error
	warnOnce sync.Once // why there is none is said once per attempt
	logger   *zap.Logger
}

// Destruct implements caddy.Destructor. Close is bounded: reads that a
// stalled device or FUSE server never finishes leave the ring abandoned
// (still mapped, with their buffers), which is said here, and Caddy's
// cleanup goes on.
func (h *ringHolder) Destruct() error {
	if h.ring == nil {
		return nil
	}
	err := h.ring.Close()
	if errors.Is(err, transmit.ErrRingAbandoned) {
		h.logger.Warn("io_uring: reads still in the kernel after cancellation; the ring is left mapped and goes away when they complete",
			zap.Error(err))
		return nil
	}
	return err
}

// provisionRing takes a reference to the shared ring. Without io_uring the
// handler falls back to sendfile and copy, saying why once.
func (fsrv *FlashServe) provisionRing(workers int) {
	v, _, _ := rings.LoadOrNew(ringKey, func() (caddy.Destructor, error) {
		r, err := transmit.NewRing(transmit.RingOptions{Workers: workers})
		return &ringHolder{ring: r, err: err, logger: fsrv.logger}, nil
	})
	h := v.(*ringHolder)
	if h.ring != nil && h.ring.Workers() != workers {
		// A reload with another stat_workers: the shared ring takes the new
		// cap (the last handler provisioned wins).
		h.ring.SetWorkers(workers)
	}
	fsrv.holdsRing = true
	if h.err != nil {
		if transmit.RingSupported || fsrv.engine == engineIOUring {
			h.warnOnce.Do(func() {
				fsrv.logger.Warn("io_uring is unavailable: data not in the page cache is read with sendfile or pread, "+
					"which hold an OS thread while the disk answers", zap.Error(h.err))
			})
		}
		return
	}
	fsrv.ring = h.ring
}

// coldChunk is the most bytes one io_uring read brings in: large enough
// for the disk's queue, small enough to start writing soon.
const coldChunk = 256 << 10

var coldBufPool = sync.Pool{New: func() any { b := make([]byte, coldChunk); return &b }}

// coldBudget lends the chunks of ring reads, one token per coldChunk: at
// most 64 MiB of them exist in the process at once, however many slow
// clients there are. A chunk is borrowed for one read and its write, and
// one that a read left to the ring comes back with the read's completion.
var coldBudget = make(chan struct{}, 64<<20/coldChunk)

// smallBufPool backs the one no-wait read of a small body.
var smallBufPool = sync.Pool{New: func() any { b := make([]byte, noWaitMax); return &b }}

// coldRead is what a ring read the request lets go of must keep: the
// body's descriptor (a reference on its entry) and the chunk it reads
// into.
type coldRead struct {
	body *statacc.Entry
	bufp *[]byte
	lent bool
}

// hold is ReadOptions.Hold: the ring owns the chunk and a reference on
// the entry until the kernel completes the read.
func (c *coldRead) hold() func() {
	c.body.Hold()
	body, bufp := c.body, c.bufp
	c.lent = true
	return func() {
		body.Release()
		coldBufPool.Put(bufp)
		<-coldBudget
	}
}

// borrow takes a chunk from the budget, waiting while it is spent.
func (c *coldRead) borrow(ctx context.Context) error {
	select {
	case coldBudget <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.bufp, c.lent = coldBufPool.Get().(*[]byte), false
	return nil
}

// giveBack returns a chunk that is not lent to the ring.
func (c *coldRead) giveBack() {
	if c.bufp != nil && !c.lent {
		coldBufPool.Put(c.bufp)
		<-coldBudget
	}
	c.bufp = nil
}

// noWaitMax is the largest body read with one RWF_NOWAIT read instead of
// a mincore probe: copying it costs less than the probe's two extra system
// calls and its mmap lock.
const noWaitMax = 64 << 10

// residencyProbe is the span probed at a time (pagecache.Probe): what is
// resident in it goes out with sendfile (or pread), what is not is read
// through the ring.
const residencyProbe = 2 << 20

// sendThroughRing sends a body of which some data may be missing from the
// page cache. Resident runs leave as they would without io_uring (sendfile
// on cleartext HTTP/1.x, pread otherwise); the rest is read through the
// ring, so that the goroutine parks while the disk answers instead of
// holding an OS thread in a blocking read. With `transmit io_uring` every
// byte is read through the ring.
func (fsrv *FlashServe) sendThroughRing(w http.ResponseWriter, r *http.Request, res *resolved, t *transfer, start, length int64) (int64, error) {
	file, fd := res.bodyFile()
	_, canSendfile := w.(io.ReaderFrom)
	canSendfile = canSendfile && r.ProtoMajor == 1 && r.TLS == nil && fd >= 0
	// Ring reads end with the request: a client that leaves, a cancelled
	// context or an unloaded config lets go of a read a stalled device
	// holds.
	ctx := r.Context()
	var cold coldRead
	var opts transmit.ReadOptions
	var sent int64
	probe := pagecache.NewProbe(fd, res.body.MincoreTrusted())
	// missing is set when the no-wait read below found the first page
	// missing: that answers what a residency probe would ask (the kernel
	// has also started reading it ahead), so the first chunk goes to the
	// ring without the probe's mmap, mincore and munmap (about 6 % of the
	// CPU on a cold tree of 8 KiB files).
	missing := false
	if fsrv.engine == engineAuto && length <= noWaitMax {
		// A small body: one read that takes only what the page cache holds
		// answers the residency question and reads the data at once. What
		// it cannot take whole goes the long way below.
		bufp := smallBufPool.Get().(*[]byte)
		defer smallBufPool.Put(bufp)
		buf := (*bufp)[:length]
		n, err := pagecache.ReadNoWait(fd, buf, start)
		if err == nil && n == len(buf) {
			k, err := w.Write(buf)
			counters.bytes[engCopy].Add(int64(k))
			t.eng = engCopy // the ring had nothing to do
			if err == nil && start == 0 && length == res.body.Size() {
				res.body.MarkResident()
			}
			return int64(k), err
		}
		missing = n == 0 && errors.Is(err, syscall.EAGAIN)
	}
	for sent < length {
		off := start + sent
		if fsrv.engine == engineAuto && !missing {
			counters.residencyProbes.Add(1)
			resident, err := probe.Resident(off, min(length-sent, residencyProbe))
			if err == nil && resident > 0 {
				var n int64
				if canSendfile {
					var zeroCopy bool
					n, zeroCopy, err = fsrv.sendFile(w.(io.ReaderFrom), w, r, file, fd, res.body.Head(), off, resident)
					if zeroCopy {
						counters.bytes[engSendfile].Add(n)
					} else {
						counters.bytes[engCopy].Add(n)
					}
				} else {
					n, err = transmit.Copy(w, file, off, resident)
					counters.bytes[engCopy].Add(n)
				}
				sent += n
				if err != nil {
					return sent, err
				}
				continue
			}
		}
		if cold.body == nil {
			cold.body = res.body
			opts.Hold = cold.hold
			opts.NoBlockDevice = res.body.NoBlockDevice()
			opts.File = res.body.FileID()
			defer cold.giveBack()
		}
		missing = false // past the first chunk, probe again
		want := min(coldChunk, length-sent)
		eng := engIOUring
		// The chunk is borrowed once the read has its turn, so that the
		// readers of a stalled file, waiting for it, hold none.
		buf, n, err := fsrv.ring.ReadLent(ctx, fd, off, &opts, func(ctx context.Context) ([]byte, error) {
			if err := cold.borrow(ctx); err != nil {
				return nil, err
			}
			return (*cold.bufp)[:want], nil
		})
		if cold.lent {
			// The request went away with the read in the kernel: the chunk
			// and the descriptor are the ring's until it completes.
			cold.bufp = nil
			return sent, err
		}
		if err != nil && ctx.Err() != nil {
			return sent, err
		}
		if buf == nil {
			// The ring failed before lending was asked for (closed).
			if err := cold.borrow(ctx); err != nil {
				return sent, err
			}
			buf = (*cold.bufp)[:want]
		}
		if err != nil && ringFault(err) {
			// The ring failed, not the disk: this read goes on with pread,
			// and the response does not notice.
			counters.ringFallbacks.Add(1)
			eng = engCopy
			fsrv.logger.Debug("io_uring read failed; reading with pread", zap.Error(err))
			n, err = file.ReadAt(buf, off)
		}
		// ReadFull went on after short reads: only a read of 0 bytes
		// before the end stops it, and that is truncation.
		if err := pagecache.ShortRead(n, len(buf), err); err != nil {
			if n > 0 {
				w.Write(buf[:n])
				sent += int64(n)
			}
			cold.giveBack()
			return sent, &transmit.ReadError{Offset: off + int64(n), Err: err}
		}
		k, err := w.Write(buf)
		cold.giveBack()
		sent += int64(k)
		counters.bytes[eng].Add(int64(k))
		if err != nil {
			return sent, err
		}
	}
	if start == 0 && length == res.body.Size() {
		// All of it was resident or has just been read: it is now.
		res.body.MarkResident()
	}
	return sent, nil
}

// ringFault reports whether a failed ring read is the ring's failure (it
// was closed, cancelled, refused or out of memory) rather than the file's,
// so that pread may do it instead.
func ringFault(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false // the request's end, not the ring's
	}
	if errors.Is(err, transmit.ErrRingClosed) {
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
