//go:build linux && !flashserve_portable

package transmit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/flashserve/caddy-flash-serve/internal/fileio"
)

// The io_uring ABI (include/uapi/linux/io_uring.h), as much as the Ring
// uses.
const (
	iouringOffSQRing = 0
	iouringOffCQRing = 0x8000000
	iouringOffSQEs   = 0x10000000

	iouringFeatSingleMmap = 1 << 0
	iouringFeatCQESkip    = 1 << 11 // IOSQE_CQE_SKIP_SUCCESS, Linux 5.17

	iouringOpNop = 0

	iouringOpAsyncCancel = 14 // Linux 5.5
	iouringOpRead        = 22 // Linux 5.6

	iosqeAsync          = 1 << 4 // IOSQE_ASYNC: straight to an io-wq worker, Linux 5.6
	iosqeIOHardlink     = 1 << 3 // IOSQE_IO_HARDLINK: the next entry runs after this one, failed or not, Linux 5.5
	iosqeCQESkipSuccess = 1 << 6 // IOSQE_CQE_SKIP_SUCCESS: no completion unless it fails, Linux 5.17

	rwfNoWait = 0x8 // RWF_NOWAIT: take only what the page cache holds

	iouringSetupCQSize    = 1 << 3 // IORING_SETUP_CQSIZE: cq_entries as given, Linux 5.5
	iouringSQCQOverflow   = 1 << 1 // IORING_SQ_CQ_OVERFLOW: completions wait on the kernel's overflow list
	iouringEnterGetEvents = 1 << 0 // IORING_ENTER_GETEVENTS: flushes that list into the ring

	iouringRegisterEventFD       = 4
	iouringRegisterProbe         = 8
	iouringRegisterIOWQMaxWorker = 19 // Linux 5.15

	iouringOpSupported = 1 << 0
)

type sqringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type cqringOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

type iouringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  sqringOffsets
	cqOff                                                                  cqringOffsets
}

type sqe struct {
	opcode, flags         uint8
	ioprio                uint16
	fd                    int32
	off, addr             uint64
	len, rwFlags          uint32
	userData              uint64
	bufIndex, personality uint16
	spliceFDIn            int32
	addr3, pad            uint64
}

type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

// A read's user_data is its slot index in the low 32 bits and the slot's
// generation above them, so that a late cancellation cannot hit the next
// read of the same slot. cancelTag marks the completions of cancellations
// (and of padding no-ops), noWaitTag the failure of a no-wait first half.
const (
	cancelTag = 1 << 63
	noWaitTag = 1 << 62
	genMask   = 1<<30 - 1
)

// resClosed is the result of a read never submitted: the ring closed.
const resClosed = -1 << 31

// An operation's state, guarded by Ring.mu.
const (
	opFree     = iota
	opQueued   // waiting for the submitter: can be dropped unsent
	opInKernel // in the submission ring or the kernel: owns buf and fd
	opDone     // completed, the result waits in done for its reader
)

// Ring is a small io_uring of our own: reads of files into buffers. The
// handlers share one, from AcquireRing.
//
// One goroutine, locked to its OS thread, makes every submission, so the
// io-wq cap (IORING_REGISTER_IOWQ_MAX_WORKERS, counted per submitting
// task) bounds the whole ring. While the kernel has few reads
// (eagerBelow), a reader wakes the submitter through a channel so that
// the disk does not idle; with more, through the netpoller (an eventfd
// and relay), so that it runs once the runnable requests have queued
// their reads and enters them together: one io_uring_enter, one plug of
// the block layer, no thread hand-offs per read. No read waits for
// company. Completions are reaped by a goroutine waiting on an eventfd
// through the netpoller; a reader parks on a channel and holds no thread.
//
// A read can be let go: when its context ends it is dropped if not yet
// submitted, else cancelled with IORING_OP_ASYNC_CANCEL, its buffer and
// descriptor staying the operation's until the completion arrives
// (readOptions.Hold). At most max(2, Workers/4) reads of one file are in
// flight, so a file that hangs cannot take every slot.
type Ring struct {
	fd     int
	sqRing []byte
	cqRing []byte
	sqes   []sqe

	sqHead, sqTail, sqMask, sqArray *uint32
	cqHead, cqTail, cqMask          *uint32
	sqFlags                         *uint32 // IORING_SQ_CQ_OVERFLOW
	cqes                            []cqe

	mu       sync.Mutex
	ops      []ringOp
	free     []uint32
	queue    []uint32 // reads for the submitter, in order
	cancels  []uint64 // user_data of reads to cancel
	gates    map[uint64]*fileGate
	perFile  int // reads of one descriptor in flight at most
	workers  int // the io-wq cap to apply, 0 once applied
	inKernel int // reads submitted and not completed
	closed   bool

	slots       chan struct{} // one token per operation in flight
	kick        chan struct{} // wakes the submitter at once
	lazyKick    *os.File      // an eventfd on the netpoller: wakes it through relay
	kicked      atomic.Bool   // a lazy wake-up is pending: later readers need not write lazyKick
	closing     chan struct{} // closed by close
	submitterUp chan struct{}
	stopSubmit  chan struct{}
	submitted   chan struct{} // closed when the submitter has returned
	event       *os.File      // the eventfd, on the netpoller
	reaped      chan struct{} // closed once the ring is torn down
	closeWait   time.Duration
	wantWorkers atomic.Int32 // the io-wq cap asked for last

	skipCQE bool // IOSQE_CQE_SKIP_SUCCESS, which no-wait halves need
}

// ringEvent is what ringTrace is told of.
type ringEvent uint8

const (
	evEnter        ringEvent = iota // an io_uring_enter that submitted entries
	evEntered                       // reads submitted (cancellations not counted)
	evNoWaitHalves                  // reads submitted with a no-wait half
	evMetDisk                       // reads whose no-wait half failed
	evOverflow                      // completions flushed from the kernel's overflow list
)

// ringTrace, set only by the tests (export_test.go), counts what the rings
// do.
var ringTrace func(r *Ring, ev ringEvent, n int64)

func (r *Ring) trace(ev ringEvent, n int64) {
	if ringTrace != nil {
		ringTrace(r, ev, n)
	}
}

type ringOp struct {
	state, flags uint8
	abandoned    bool // its reader has gone: the reaper finishes it
	// noWaitFirst: a linked no-wait read goes first; metDisk: it failed.
	noWaitFirst, metDisk bool
	gen                  uint32
	fd                   int32
	off                  uint64
	buf                  []byte // kept referenced until the kernel is done with it
	done                 chan int32
	release              func() // from readOptions.Hold, run at the completion
	gate                 *fileGate
}

// fileGate bounds the reads of one descriptor in flight.
type fileGate struct {
	key   uint64
	sem   chan struct{}
	users int // readers waiting or holding a token, and abandoned reads
}

// newRing sets up a ring and probes what it needs; the error says why
// io_uring cannot be used here.
func newRing(o ringOptions) (*Ring, error) {
	if o.Entries <= 0 {
		o.Entries = 256
	}
	if o.Workers <= 0 {
		o.Workers = 16
	}
	if o.CloseWait <= 0 {
		o.CloseWait = 3 * time.Second
	}
	if o.cqEntries <= 0 {
		o.cqEntries = 4 * o.Entries
	}
	p := iouringParams{flags: iouringSetupCQSize, cqEntries: uint32(o.cqEntries)}
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(o.Entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno == unix.EINVAL {
		p = iouringParams{}
		fd, _, errno = unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(o.Entries), uintptr(unsafe.Pointer(&p)), 0)
	}
	if errno != 0 {
		return nil, setupError(errno)
	}
	// Room for three completions a read in flight (the read, a failed
	// no-wait half, a cancellation); more wait on the kernel's overflow
	// list, which drain flushes.
	n := int(min(p.sqEntries, p.cqEntries/3))
	if o.inFlight > 0 {
		n = o.inFlight
	}
	r := &Ring{fd: int(fd), closeWait: o.CloseWait, skipCQE: p.features&iouringFeatCQESkip != 0,
		ops: make([]ringOp, n), free: make([]uint32, n), queue: make([]uint32, 0, n),
		gates: make(map[uint64]*fileGate), slots: make(chan struct{}, n), kick: make(chan struct{}, 1),
		closing: make(chan struct{}), submitterUp: make(chan struct{}), stopSubmit: make(chan struct{}),
		submitted: make(chan struct{}), reaped: make(chan struct{})}
	for i := range n {
		r.free[i] = uint32(i)
		r.ops[i].done = make(chan int32, 1)
	}
	if err := r.setup(&p); err != nil {
		r.unmap()
		return nil, err
	}
	r.setWorkersLocked(o.Workers)
	go r.submitter()
	go r.relay()
	<-r.submitterUp // the cap is applied before any read
	go r.reap()
	return r, nil
}

// setup maps the rings, probes the opcodes and makes the eventfds.
func (r *Ring) setup(p *iouringParams) error {
	if err := r.mapRings(p); err != nil {
		return err
	}
	if err := r.probe(); err != nil {
		return err
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("io_uring: eventfd: %w", err)
	}
	r.event = os.NewFile(uintptr(efd), "io_uring-eventfd")
	if _, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), iouringRegisterEventFD, uintptr(unsafe.Pointer(&efd)), 1, 0, 0); errno != 0 {
		return fmt.Errorf("io_uring: registering the eventfd: %w", errno)
	}
	kfd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("io_uring: eventfd: %w", err)
	}
	r.lazyKick = os.NewFile(uintptr(kfd), "io_uring-submit-eventfd")
	return nil
}

// setupError explains why io_uring_setup failed.
func setupError(errno syscall.Errno) error {
	switch errno {
	case unix.ENOSYS:
		return fmt.Errorf("io_uring: not in this kernel (Linux 5.6 or later needed): %w", errno)
	case unix.EPERM:
		return fmt.Errorf("io_uring: not permitted (kernel.io_uring_disabled is set, or a seccomp filter blocks it): %w", errno)
	case unix.ENOMEM:
		return fmt.Errorf("io_uring: out of locked memory (raise RLIMIT_MEMLOCK, LimitMEMLOCK= in systemd): %w", errno)
	}
	return fmt.Errorf("io_uring: setup: %w", errno)
}

func (r *Ring) mapRings(p *iouringParams) error {
	sqSize := int(p.sqOff.array) + int(p.sqEntries)*4
	cqSize := int(p.cqOff.cqes) + int(p.cqEntries)*int(unsafe.Sizeof(cqe{}))
	single := p.features&iouringFeatSingleMmap != 0
	if single {
		sqSize = max(sqSize, cqSize)
	}
	var err error
	r.sqRing, err = unix.Mmap(r.fd, iouringOffSQRing, sqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("io_uring: mapping the submission ring: %w", err)
	}
	if single {
		r.cqRing = r.sqRing
	} else if r.cqRing, err = unix.Mmap(r.fd, iouringOffCQRing, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fmt.Errorf("io_uring: mapping the completion ring: %w", err)
	}
	sqeBytes, err := unix.Mmap(r.fd, iouringOffSQEs, int(p.sqEntries)*int(unsafe.Sizeof(sqe{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("io_uring: mapping the submission entries: %w", err)
	}
	r.sqes = unsafe.Slice((*sqe)(unsafe.Pointer(&sqeBytes[0])), p.sqEntries)
	u32 := func(b []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }
	r.sqHead, r.sqTail, r.sqMask, r.sqArray = u32(r.sqRing, p.sqOff.head), u32(r.sqRing, p.sqOff.tail), u32(r.sqRing, p.sqOff.ringMask), u32(r.sqRing, p.sqOff.array)
	r.sqFlags = u32(r.sqRing, p.sqOff.flags)
	r.cqHead, r.cqTail, r.cqMask = u32(r.cqRing, p.cqOff.head), u32(r.cqRing, p.cqOff.tail), u32(r.cqRing, p.cqOff.ringMask)
	r.cqes = unsafe.Slice((*cqe)(unsafe.Pointer(&r.cqRing[p.cqOff.cqes])), p.cqEntries)
	return nil
}

// probe checks that the kernel has IORING_OP_READ and ASYNC_CANCEL.
func (r *Ring) probe() error {
	var buf [16 + 256*8]byte
	if _, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), iouringRegisterProbe, uintptr(unsafe.Pointer(&buf[0])), 256, 0, 0); errno != 0 {
		return fmt.Errorf("io_uring: probing opcodes (Linux 5.6 or later needed): %w", errno)
	}
	lastOp := buf[0]
	if lastOp < iouringOpRead {
		return fmt.Errorf("io_uring: the kernel has no IORING_OP_READ (Linux 5.6 or later needed)")
	}
	for _, op := range []int{iouringOpRead, iouringOpAsyncCancel} {
		if flags := *(*uint16)(unsafe.Pointer(&buf[16+op*8+2])); flags&iouringOpSupported == 0 {
			return fmt.Errorf("io_uring: opcode %d is not supported here", op)
		}
	}
	return nil
}

// unmap frees the rings and closes their descriptors.
func (r *Ring) unmap() {
	if r.event != nil {
		r.event.Close()
	}
	if r.lazyKick != nil {
		r.lazyKick.Close()
	}
	if r.sqes != nil {
		unix.Munmap(unsafe.Slice((*byte)(unsafe.Pointer(&r.sqes[0])), len(r.sqes)*int(unsafe.Sizeof(sqe{}))))
	}
	if r.cqRing != nil && &r.cqRing[0] != &r.sqRing[0] {
		unix.Munmap(r.cqRing)
	}
	if r.sqRing != nil {
		unix.Munmap(r.sqRing)
	}
	unix.Close(r.fd)
}

// setWorkers changes the io-wq cap (and the reads of one file in flight
// at most): a reload with another stat_workers.
func (r *Ring) setWorkers(n int) {
	if n <= 0 {
		return
	}
	r.mu.Lock()
	r.setWorkersLocked(n)
	r.mu.Unlock()
	r.wake()
}

func (r *Ring) setWorkersLocked(n int) {
	r.workers = n
	r.perFile = max(2, n/4)
	r.wantWorkers.Store(int32(n))
}

// workerCap is the io-wq cap asked for last.
func (r *Ring) workerCap() int { return int(r.wantWorkers.Load()) }

// NoWaitFirst reports whether reads can have a no-wait half
// (readOptions.NoWaitFirst): the kernel has IOSQE_CQE_SKIP_SUCCESS.
func (r *Ring) NoWaitFirst() bool { return r != nil && r.skipCQE }

// eagerBelow is the number of reads in the kernel under which a new read
// wakes the submitter at once: with fewer, the disk may idle while the
// read waits for the scheduler.
const eagerBelow = 4

// wake makes the submitter look at the queues at once.
func (r *Ring) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// wakeForRead wakes the submitter for a read just queued: at once if the
// kernel has few reads, else through the netpoller, where only the first
// reader since the last wake writes the eventfd.
func (r *Ring) wakeForRead(inKernel int) {
	if inKernel < eagerBelow {
		r.wake()
		return
	}
	if !r.kicked.Swap(true) {
		one := [8]byte{1}
		r.lazyKick.Write(one[:])
	}
}

// relay wakes the submitter for each lazy kick, until teardown closes
// the eventfd.
func (r *Ring) relay() {
	var b [8]byte
	for {
		if _, err := r.lazyKick.Read(b[:]); errors.Is(err, os.ErrClosed) {
			return
		} else if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			time.Sleep(time.Millisecond) // cannot happen; do not spin
		}
		r.wake()
	}
}

// submitter makes every submission from one locked OS thread, which
// exits, with its io-wq, when it returns after teardown.
func (r *Ring) submitter() {
	runtime.LockOSThread()
	defer close(r.submitted)
	r.submit()
	close(r.submitterUp)
	for {
		select {
		case <-r.kick:
			// Cleared before the queues are taken, so no queued read is
			// missed.
			r.kicked.Store(false)
			r.submit()
		case <-r.stopSubmit:
			return
		}
	}
}

// submit applies a changed worker cap, then moves the queued
// cancellations and reads into the submission ring and enters them.
func (r *Ring) submit() {
	for {
		r.mu.Lock()
		if w := r.workers; w > 0 {
			r.workers = 0
			r.mu.Unlock()
			// Best effort: Linux before 5.15 has no io-wq limit.
			limits := [2]uint32{uint32(w), uint32(w)}
			unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), iouringRegisterIOWQMaxWorker, uintptr(unsafe.Pointer(&limits)), 2, 0, 0)
			r.mu.Lock()
		}
		head := atomic.LoadUint32(r.sqHead)
		tail := *r.sqTail // this goroutine is its only writer
		mask := *r.sqMask
		space := uint32(len(r.sqes)) - (tail - head)
		put := func(e sqe) {
			i := tail & mask
			r.sqes[i] = e
			*(*uint32)(unsafe.Add(unsafe.Pointer(r.sqArray), uintptr(i)*4)) = i
			tail++
			space--
		}
		for space > 0 && len(r.cancels) > 0 {
			put(sqe{opcode: iouringOpAsyncCancel, fd: -1, addr: r.cancels[0], userData: cancelTag | r.cancels[0]})
			r.cancels = r.cancels[1:]
		}
		reads, noWait := 0, 0
		for space > 0 && len(r.queue) > 0 {
			idx := r.queue[0]
			op := &r.ops[idx]
			read := sqe{opcode: iouringOpRead, flags: op.flags, fd: op.fd, off: op.off,
				addr: uint64(uintptr(unsafe.Pointer(&op.buf[0]))), len: uint32(len(op.buf)),
				userData: uint64(op.gen)<<32 | uint64(idx)}
			if op.noWaitFirst {
				if space < 2 {
					break
				}
				first := read
				first.flags |= iosqeIOHardlink | iosqeCQESkipSuccess
				first.rwFlags = rwfNoWait
				first.userData |= noWaitTag
				put(first)
				noWait++
			}
			put(read)
			reads++
			r.queue = r.queue[1:]
			op.state = opInKernel
			r.inKernel++
		}
		if noWait > 0 {
			// The kernel plugs the block layer for a submission of more
			// than two entries: the disk reads the no-wait halves start
			// wait in the plug, so each half fails rather than race a fast
			// disk unnoticed, and the disk is signalled once. Silent no-ops
			// pad a short batch.
			for n := tail - atomic.LoadUint32(r.sqHead); n < 3 && space > 0; n++ {
				put(sqe{opcode: iouringOpNop, flags: iosqeCQESkipSuccess, fd: -1, userData: cancelTag})
			}
		}
		if len(r.cancels) == 0 {
			r.cancels = r.cancels[:0:0]
		}
		if len(r.queue) == 0 {
			r.queue = r.queue[:0]
		}
		atomic.StoreUint32(r.sqTail, tail)
		more := len(r.queue) > 0 || len(r.cancels) > 0
		r.mu.Unlock()
		r.trace(evEntered, int64(reads))
		r.trace(evNoWaitHalves, int64(noWait))
		r.enter()
		if !more {
			return
		}
	}
}

// enter hands the kernel what the submission ring holds.
func (r *Ring) enter() {
	for tries := 0; tries < 1000; tries++ {
		pending := atomic.LoadUint32(r.sqTail) - atomic.LoadUint32(r.sqHead)
		if pending == 0 {
			return
		}
		r.trace(evEnter, 1)
		_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(pending), 0, 0, 0, 0)
		switch errno {
		case 0, unix.EINTR:
		case unix.EAGAIN, unix.EBUSY:
			// Completions not reaped yet: the reaper runs meanwhile.
			time.Sleep(time.Millisecond)
		default:
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// ReadLending reads len(buf) bytes of the file fd at off through the ring
// (prewarm.ReaderAt): it stops short, with a nil error, only at the end of
// the file. If ctx ends while the kernel has the read, hold is called
// (readOptions.Hold) and buf is left to the ring. A read the ring fails
// for its own reasons is done with pread (preadIfRingFailed).
func (r *Ring) ReadLending(ctx context.Context, fd int, buf []byte, off int64, hold func() (release func())) (int, error) {
	o := readOptions{NoBlockDevice: fileio.NoBlockDeviceFD(fd)}
	lent := false
	if hold != nil {
		o.Hold = func() func() {
			lent = true
			return hold()
		}
	}
	n, err := r.readFull(ctx, fd, buf, off, &o)
	if lent {
		return n, err // buf is the ring's until the kernel is done with it
	}
	n, err, _ = preadIfRingFailed(ctx, fd, buf, off, n, err)
	return n, err
}

// readFull reads len(buf) bytes at off, going on after short reads; it
// stops short only at a read of 0 bytes or an error. A short read of a
// file without a block device is finished with pread: the kernel retries
// a short direct-I/O FUSE read through io_uring from the starting offset
// into the rest of the buffer, which would repeat the span's start.
func (r *Ring) readFull(ctx context.Context, fd int, buf []byte, off int64, o *readOptions) (int, error) {
	done := 0
	for done < len(buf) {
		n, err := r.read(ctx, fd, buf[done:], off+int64(done), o, nil)
		done += n
		if err != nil || n == 0 {
			return done, err
		}
		if done < len(buf) && o.NoBlockDevice {
			m, err := preadFull(fd, buf[done:], off+int64(done))
			return done + m, err
		}
	}
	return done, nil
}

// preadFull reads with pread until buf is full, the end of the file or an
// error.
func preadFull(fd int, buf []byte, off int64) (int, error) {
	n, err := fileio.ReadAt(fd, buf, off)
	switch {
	case err == io.EOF:
		return n, nil
	case err != nil:
		return n, &os.PathError{Op: "pread", Path: fmt.Sprint("fd ", fd), Err: err}
	}
	return n, nil
}

// readLent is readFull into a buffer that lend gives once the read has
// its turn, so that readers waiting for a stalled file hold none. It
// returns that buffer (nil if lend was not called or failed).
func (r *Ring) readLent(ctx context.Context, fd int, off int64, o *readOptions, lend func(context.Context) ([]byte, error)) ([]byte, int, error) {
	var buf []byte
	n, err := r.read(ctx, fd, nil, off, o, func(ctx context.Context) ([]byte, error) {
		b, err := lend(ctx)
		buf = b
		return b, err
	})
	if err != nil || n == 0 || n == len(buf) {
		return buf, n, err
	}
	m, err := r.readFull(ctx, fd, buf[n:], off+int64(n), o)
	return buf, n + m, err
}

// read submits one read at off, into buf or, if lend is set, into the
// buffer lend gives once the read has its turn, and waits for it or for
// ctx to end (letGo).
func (r *Ring) read(ctx context.Context, fd int, buf []byte, off int64, o *readOptions, lend func(context.Context) ([]byte, error)) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	g, err := r.takeTurn(ctx, fd, o)
	if err == nil && lend != nil {
		if buf, err = lend(ctx); err == nil && len(buf) == 0 {
			err = errors.New("io_uring: lent an empty buffer")
		}
	}
	r.mu.Lock()
	if err == nil && r.closed {
		err = errRingClosed
	}
	if err != nil {
		if g != nil {
			<-g.sem
			<-r.slots
			r.leaveGateLocked(g)
		}
		r.mu.Unlock()
		return 0, err
	}
	idx := r.queueLocked(fd, off, buf, g, o)
	inKernel := r.inKernel
	r.mu.Unlock()
	r.wakeForRead(inKernel)

	op := &r.ops[idx]
	var res int32
	select {
	case res = <-op.done:
	case <-ctx.Done():
		if res, err = r.letGo(idx, o, ctx.Err()); err != nil {
			return 0, err
		}
	case <-r.closing:
		// close has cancelled the read: a reader that can let go does.
		if res, err = r.letGo(idx, o, errRingClosed); err != nil {
			return 0, err
		}
	}
	r.mu.Lock()
	if op.metDisk {
		o.MetDisk = true
	}
	r.freeOpLocked(idx)
	r.mu.Unlock()
	if res == resClosed {
		return 0, errRingClosed
	}
	if res < 0 {
		if err := ctx.Err(); err != nil && (syscall.Errno(-res) == unix.ECANCELED || syscall.Errno(-res) == unix.EINTR) {
			return 0, err
		}
		return 0, &os.PathError{Op: "io_uring read", Path: fmt.Sprint("fd ", fd), Err: syscall.Errno(-res)}
	}
	return int(res), nil
}

// takeTurn waits for a token of the file's gate, then for a slot of the
// ring: readers of a hung file wait at its gate and leave the slots to
// others. On an error it has given back what it took, the gate included,
// and returns a nil gate.
func (r *Ring) takeTurn(ctx context.Context, fd int, o *readOptions) (*fileGate, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, errRingClosed
	}
	key := uint64(fd) | 1<<63
	if o.File != 0 {
		key = o.File &^ (1 << 63)
	}
	g := r.gates[key]
	if g == nil {
		g = &fileGate{key: key, sem: make(chan struct{}, r.perFile)}
		r.gates[key] = g
	}
	g.users++
	r.mu.Unlock()
	var err error
	select {
	case g.sem <- struct{}{}:
		select {
		case r.slots <- struct{}{}:
			return g, nil
		case <-ctx.Done():
			err = ctx.Err()
		case <-r.closing:
			err = errRingClosed
		}
		<-g.sem
	case <-ctx.Done():
		err = ctx.Err()
	case <-r.closing:
		err = errRingClosed
	}
	r.mu.Lock()
	r.leaveGateLocked(g)
	r.mu.Unlock()
	return nil, err
}

// queueLocked puts a read in a free slot and in the submitter's queue.
func (r *Ring) queueLocked(fd int, off int64, buf []byte, g *fileGate, o *readOptions) uint32 {
	idx := r.free[len(r.free)-1]
	r.free = r.free[:len(r.free)-1]
	op := &r.ops[idx]
	op.gen = (op.gen + 1) & genMask
	op.state = opQueued
	op.fd, op.off, op.buf, op.gate = int32(fd), uint64(off), buf, g
	op.flags = 0
	if o.NoBlockDevice {
		op.flags = iosqeAsync
	}
	op.noWaitFirst, op.metDisk = false, false
	if o.NoWaitFirst {
		o.NoWaitFirst = false
		op.noWaitFirst = r.skipCQE && !o.NoBlockDevice
	}
	r.queue = append(r.queue, idx)
	return idx
}

// letGo ends the wait of a reader that is going away (gone says why): a
// read not submitted yet is dropped; one the kernel has is cancelled and,
// with o.Hold, left to the ring; else its result is waited for, and
// returned with a nil error.
func (r *Ring) letGo(idx uint32, o *readOptions, gone error) (int32, error) {
	op := &r.ops[idx]
	r.mu.Lock()
	switch op.state {
	case opQueued:
		for i, q := range r.queue {
			if q == idx {
				r.queue = append(r.queue[:i], r.queue[i+1:]...)
				break
			}
		}
		r.freeOpLocked(idx)
		r.mu.Unlock()
		return 0, gone
	case opInKernel:
		r.cancels = append(r.cancels, uint64(op.gen)<<32|uint64(idx))
		abandon := o.Hold != nil
		if abandon {
			op.abandoned = true
			op.release = o.Hold()
		}
		r.mu.Unlock()
		r.wake()
		if abandon {
			return 0, gone
		}
	default: // opDone: the result is there
		r.mu.Unlock()
	}
	return <-op.done, nil
}

// freeOpLocked gives an operation's slot, its file's token and its ring
// token back.
func (r *Ring) freeOpLocked(idx uint32) {
	op := &r.ops[idx]
	g := op.gate
	op.state, op.abandoned, op.buf, op.release, op.gate = opFree, false, nil, nil, nil
	r.free = append(r.free, idx)
	<-g.sem
	r.leaveGateLocked(g)
	<-r.slots
}

func (r *Ring) leaveGateLocked(g *fileGate) {
	if g.users--; g.users == 0 && r.gates[g.key] == g {
		delete(r.gates, g.key)
	}
}

// reap hands each completion to its reader, and tears the ring down once
// it is closed with nothing left in the kernel.
func (r *Ring) reap() {
	var b [8]byte
	for {
		_, err := r.event.Read(b[:])
		if r.drain() {
			r.teardown()
			return
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			time.Sleep(10 * time.Millisecond) // cannot happen; do not spin
		}
	}
}

// drain hands out the completions and reports whether the ring is closed
// with nothing left in the kernel.
func (r *Ring) drain() bool {
	var releases []func()
	r.mu.Lock()
	for {
		head := atomic.LoadUint32(r.cqHead)
		tail := atomic.LoadUint32(r.cqTail)
		if head == tail {
			// Completions on the kernel's overflow list, and all later
			// ones, wait for an enter with GETEVENTS.
			if atomic.LoadUint32(r.sqFlags)&iouringSQCQOverflow == 0 {
				break
			}
			r.trace(evOverflow, 1)
			unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 0, 0, iouringEnterGetEvents, 0, 0)
			if atomic.LoadUint32(r.cqTail) == tail {
				break // nothing moved in: the next wake tries again
			}
			continue
		}
		mask := *r.cqMask
		for ; head != tail; head++ {
			c := r.cqes[head&mask]
			if c.userData&cancelTag != 0 {
				continue // a cancellation's own result: its read says the rest
			}
			idx, gen := uint32(c.userData), uint32(c.userData>>32)&genMask
			if int(idx) >= len(r.ops) || r.ops[idx].state != opInKernel || r.ops[idx].gen != gen {
				continue
			}
			op := &r.ops[idx]
			if c.userData&noWaitTag != 0 {
				// The no-wait half failed: the read itself follows.
				if !op.metDisk {
					op.metDisk = true
					r.trace(evMetDisk, 1)
				}
				continue
			}
			r.inKernel--
			res := injectedFault(c.res)
			if op.abandoned {
				if op.release != nil {
					releases = append(releases, op.release)
				}
				r.freeOpLocked(idx)
				continue
			}
			op.state = opDone
			op.done <- res
		}
		atomic.StoreUint32(r.cqHead, head)
	}
	idle := r.closed && r.inKernel == 0
	r.mu.Unlock()
	for _, f := range releases {
		f()
	}
	return idle
}

// teardown ends the submitter and frees the ring.
func (r *Ring) teardown() {
	close(r.stopSubmit)
	<-r.submitted
	r.unmap() // closing lazyKick ends relay
	close(r.reaped)
}

// close cancels the reads in flight and waits at most CloseWait for their
// completions; then the ring is torn down. If the kernel still has reads
// (a hung device, a FUSE server that ignores interrupts), it returns
// errRingAbandoned and leaves the ring mapped, rather than unmap memory
// the kernel may still write, until the last of them completes.
func (r *Ring) close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	close(r.closing)
	for _, idx := range r.queue {
		op := &r.ops[idx]
		op.state = opDone
		op.done <- resClosed
	}
	r.queue = r.queue[:0]
	for i := range r.ops {
		if op := &r.ops[i]; op.state == opInKernel {
			r.cancels = append(r.cancels, uint64(op.gen)<<32|uint64(i))
		}
	}
	r.mu.Unlock()
	r.wake()
	one := [8]byte{1}
	r.event.Write(one[:])
	t := time.NewTimer(r.closeWait)
	defer t.Stop()
	select {
	case <-r.reaped:
		return nil
	case <-t.C:
	}
	r.mu.Lock()
	n := r.inKernel
	r.mu.Unlock()
	return fmt.Errorf("%w: %d still there after %v", errRingAbandoned, n, r.closeWait)
}

// ringSupported is true where the io_uring engine is compiled in.
const ringSupported = true

// Reads reports the ring's operations in flight (submitted, queued, or
// abandoned and not yet completed) and how many it can hold; 0, 0 for a
// nil ring.
func (r *Ring) Reads() (inFlight, slots int) {
	if r == nil {
		return 0, 0
	}
	return len(r.slots), cap(r.slots)
}
