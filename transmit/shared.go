package transmit

import (
	"errors"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
)

// rings holds the process's io_uring across config reloads: a reload
// provisions the new handlers before it cleans up the old ones, so the
// ring lives on while any handler holds it.
var rings = caddy.NewUsagePool()

const ringKey = "io_uring"

// ringHolder is the shared ring, or why there is none.
type ringHolder struct {
	ring     *Ring
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
	err := h.ring.close()
	if errors.Is(err, errRingAbandoned) {
		h.logger.Warn("io_uring: reads still in the kernel after cancellation; the ring is left mapped and goes away when they complete",
			zap.Error(err))
		return nil
	}
	return err
}

// AcquireRing takes a reference to the process's io_uring, shared by
// every handler across config reloads and made on first use with workers
// as the cap of its io-wq (IORING_REGISTER_IOWQ_MAX_WORKERS); a later call
// with another count moves the cap (the last handler provisioned wins).
// It returns nil where io_uring cannot be used, and then says why at WARN
// on logger, once per attempt to make the ring, if this build has
// io_uring or required is set (`transmit io_uring`): bodies are then
// read with sendfile or pread. Every call, whatever it returned, must be
// matched by one ReleaseRing.
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

// ReleaseRing gives back a reference that AcquireRing took. The last one
// closes the ring, waiting at most 3 s for the reads in the kernel: if a
// stalled device or FUSE server still holds some, the ring is left mapped
// until they complete, which is said at WARN.
func ReleaseRing() { rings.Delete(ringKey) }

// SharedRing returns the ring that AcquireRing made, nil if there is
// none, without taking a reference: for work that the config holding the
// ring bounds (the admin API's prewarm, which a reload cancels).
func SharedRing() *Ring {
	var h *ringHolder
	rings.Range(func(_, v any) bool { h = v.(*ringHolder); return false })
	if h == nil {
		return nil
	}
	return h.ring
}
