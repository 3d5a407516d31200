package transmit

import (
	"errors"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
)

// ringOptions size a Ring.
type ringOptions struct {
	// Entries is the number of reads in flight at most. Default: 256.
	Entries int
	// Workers caps the io-wq workers that block on the disk, for the
	// whole ring; a quarter of it (at least 2) is the most reads of one
	// file in flight. Default: 16.
	Workers int
	// CloseWait is how long close waits for reads in the kernel before it
	// abandons the ring. Default: 3 s.
	CloseWait time.Duration
	// For tests: the completion ring's size (default: 4 times Entries)
	// and the most reads in flight (default: a third of it, at most
	// Entries).
	cqEntries, inFlight int
}

// readOptions say how a read may be let go and how to submit it.
type readOptions struct {
	// Hold, if set, lets a read whose context ends return at once while
	// the kernel still has it: Hold is called then (under the ring's lock:
	// it must not call the ring) and must keep the buffer and descriptor
	// from reuse; the func it returns is called at the completion. Without
	// Hold, a cancelled read waits for its completion.
	Hold func() (release func())
	// NoBlockDevice marks a file without a block device (FUSE, NFS): its
	// reads go straight to an io-wq worker (IOSQE_ASYNC), since one tried
	// inline can block the submitting thread.
	NoBlockDevice bool
	// File identifies the file for the bound on its reads in flight, where
	// several descriptors may be open on it; 0: the descriptor is the file.
	File uint64
	// NoWaitFirst asks, where the ring can (Ring.NoWaitFirst), that the
	// next read be preceded in the same submission by a hard-linked
	// RWF_NOWAIT read of the same range: its failure says the data was
	// not all in the page cache, and the disk read it starts is plugged
	// with the batch, so that one enter signals the disk once. It applies
	// to one read and is cleared by it; MetDisk is then set if the no-wait
	// half failed.
	NoWaitFirst, MetDisk bool
}

// errRingClosed is returned by reads on a closed Ring.
var errRingClosed = errors.New("io_uring: ring closed")

// errRingAbandoned is returned by close when reads were still in the
// kernel after CloseWait.
var errRingAbandoned = errors.New("io_uring: ring abandoned with reads in the kernel")

// rings holds the process's io_uring across config reloads, which
// provision the new handlers before they clean up the old ones.
var rings = caddy.NewUsagePool()

const ringKey = "io_uring"

// ringHolder is the shared ring, or why there is none.
type ringHolder struct {
	ring     *Ring
	err      error
	warnOnce sync.Once // why there is none is said once per attempt
	logger   *zap.Logger
}

// Destruct implements caddy.Destructor. Close is bounded: reads a stalled
// device never finishes leave the ring abandoned, which is said here, and
// Caddy's cleanup goes on.
func (h *ringHolder) Destruct() error {
	if h.ring == nil {
		return nil
	}
	err := h.ring.close()
	if errors.Is(err, errRingAbandoned) {
		h.logger.Warn("io_uring: reads still in the kernel after cancellation; the ring is left mapped and goes away when they complete",
			zap.Error(err))
		return nil
	}
	return err
}

// AcquireRing takes a reference to the process's io_uring, made on first
// use with workers as its io-wq cap; a later call with another count moves
// the cap (the last handler provisioned wins). It returns nil where
// io_uring cannot be used, and then says why at WARN, once per attempt to
// make the ring, if this build has io_uring or required is set. Every
// call, whatever it returned, must be matched by one ReleaseRing.
func AcquireRing(workers int, required bool, logger *zap.Logger) *Ring {
	v, _, _ := rings.LoadOrNew(ringKey, func() (caddy.Destructor, error) {
		r, err := newRing(ringOptions{Workers: workers})
		return &ringHolder{ring: r, err: err, logger: logger}, nil
	})
	h := v.(*ringHolder)
	if h.err != nil {
		if ringSupported || required {
			h.warnOnce.Do(func() {
				logger.Warn("io_uring is unavailable: data not in the page cache is read with sendfile or pread, "+
					"which hold an OS thread while the disk answers", zap.Error(h.err))
			})
		}
		return nil
	}
	if h.ring.workerCap() != workers {
		h.ring.setWorkers(workers)
	}
	return h.ring
}

// ReleaseRing gives back a reference that AcquireRing took; the last one
// closes the ring (Ring.close).
func ReleaseRing() { rings.Delete(ringKey) }

// SharedRing returns the ring that AcquireRing made, nil if there is
// none, without taking a reference: for work that the config holding the
// ring bounds (the admin API's prewarm, which a reload cancels).
func SharedRing() *Ring {
	if h := sharedHolder(); h != nil {
		return h.ring
	}
	return nil
}

func sharedHolder() *ringHolder {
	var h *ringHolder
	rings.Range(func(_, v any) bool { h = v.(*ringHolder); return false })
	return h
}
