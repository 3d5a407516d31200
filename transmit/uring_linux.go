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
// uses: two opcodes, IOSQE_ASYNC, the eventfd, the probe and the io-wq
// limit.
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
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64
	addr        uint64
	len         uint32
	rwFlags     uint32
	userData    uint64
	bufIndex    uint16
	personality uint16
	spliceFDIn  int32
	addr3       uint64
	pad         uint64
}

type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

// A read's user_data is its slot index in the low 32 bits and the slot's
// generation above them, so that a cancellation meant for a read that has
// completed meanwhile cannot hit the next read of the same slot. The top
// bit marks the completions of the cancellations themselves (and of the
// no-ops that pad a batch, which post none unless they fail); the next
// one the failure of a read's no-wait first half (readOptions.NoWaitFirst).
const (
	cancelTag = 1 << 63
	noWaitTag = 1 << 62
	genMask   = 1<<30 - 1
)

// resClosed is the result handed to a read the ring never submitted
// because it was closed.
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
// io-wq that does the blocking reads is that one thread's: its cap
// (Workers, IORING_REGISTER_IOWQ_MAX_WORKERS, which the kernel counts per
// submitting task) bounds the whole ring, not each goroutine's thread.
// While the kernel has few reads (eagerBelow), a reader wakes it through
// a channel, and it runs next: the disk must not idle. With more in the
// kernel, readers wake it through the netpoller (an eventfd and a relay
// goroutine): it runs when the scheduler polls the network, that is once
// the requests already runnable have queued their reads, and enters them
// together. Woken by a channel every time, each read had its own
// io_uring_enter and its own two thread hand-offs (the submitter's thread
// is locked); the block layer plugs per enter, so a batch also signals
// the disk once. No read waits for company: the submitter enters what is
// queued when it gets to it.
// Completions are reaped by a goroutine that waits on an eventfd through
// the netpoller. A goroutine waiting for a read parks on a channel, so a
// read from a cold disk holds no OS thread.
//
// A read can be let go: when its context ends it is dropped if the
// submitter has not taken it yet, and otherwise cancelled with
// IORING_OP_ASYNC_CANCEL; its buffer and descriptor stay the operation's
// until the kernel's completion arrives (see readOptions.Hold). At most
// max(2, Workers/4) reads of one descriptor are in flight, so a file that
// hangs cannot take every slot.
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
	wantWorkers atomic.Int32 // the cap asked for last, for tests

	// enters counts the io_uring_enter calls that submitted entries,
	// entered the reads submitted (cancellations not counted), for tests
	// of the batching; noWaitFirst counts the reads entered with a no-wait
	// half, metDisk those whose no-wait half failed.
	enters, entered, noWaitFirst, metDisk, overflows atomic.Int64

	// skipCQE: the kernel has IOSQE_CQE_SKIP_SUCCESS, which reads with a
	// no-wait half need (their first half posts only its failure).
	skipCQE bool

	// failNext makes the next completions fail with ECANCELED, to test
	// the fallback.
	failNext atomic.Int32
	// shortNext makes the next completions report half their count, as
	// kernels before 5.9 and some network filesystems do, to test that
	// reads go on from where they stopped.
	shortNext atomic.Int32
}

type ringOp struct {
	state     uint8
	flags     uint8
	abandoned bool // its reader has gone: the reaper finishes it
	// noWaitFirst: the read goes in as two linked entries, a no-wait read
	// and the read itself; metDisk is set when the first failed (the data
	// was not all in the page cache).
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

// ringOptions size a Ring.
type ringOptions struct {
	// Entries is the number of reads in flight at most. Default: 256.
	Entries int
	// Workers caps the kernel's io-wq workers that block on the disk
	// (IORING_REGISTER_IOWQ_MAX_WORKERS), for the whole ring; a quarter
	// of it (at least 2) is the most reads of one file in flight.
	// Default: 16.
	Workers int
	// CloseWait is how long close waits for reads in the kernel before it
	// abandons the ring. Default: 3 s.
	CloseWait time.Duration
	// cqEntries and inFlight are for the tests: the completion ring's
	// size (default: 4 times Entries) and the most reads in flight
	// (default: what the completion ring holds three completions each
	// of, at most Entries).
	cqEntries, inFlight int
}

// readOptions say how a read may be let go and how to submit it.
type readOptions struct {
	// Hold, if set, lets a read whose context ends return at once while
	// the kernel still has it: Hold is called then (with the ring's lock
	// held: it must not call the ring) and must keep the buffer and the
	// descriptor from being reused or closed, for example by taking a
	// reference on the cache entry that owns the descriptor; the func it
	// returns is called once the kernel's completion arrives. Without
	// Hold, a cancelled read waits for that completion.
	Hold func() (release func())
	// NoBlockDevice marks a file on a filesystem without a block device
	// (FUSE, NFS, see NoBlockDevice): its reads go straight to an io-wq
	// worker (IOSQE_ASYNC), since such a read tried inline can block the
	// submitting thread, and short reads of it are finished with pread.
	NoBlockDevice bool
	// File identifies the file for the bound on reads of one file in
	// flight (its device and inode, say), where several descriptors may
	// be open on it; 0 means the descriptor is the file.
	File uint64
	// NoWaitFirst asks, where the ring can (Ring.NoWaitFirst), that the
	// next read be preceded in the same submission by a no-wait read of
	// the same range (RWF_NOWAIT, hard-linked): its failure says that the
	// data was not all in the page cache, and the disk read it starts is
	// plugged with the rest of the batch, so that one enter signals the
	// disk once for every read in it. The read itself follows, from the
	// page cache or waiting for the disk. It applies to one read only and
	// is cleared by it.
	NoWaitFirst bool
	// MetDisk is set by a read with NoWaitFirst whose no-wait half failed:
	// the read waited for the disk (or for a read of it already started).
	MetDisk bool
}

// errRingClosed is returned by reads on a closed Ring.
var errRingClosed = errors.New("io_uring: ring closed")

// errRingAbandoned is returned by close when reads were still in the
// kernel after CloseWait: the ring is left mapped, with the buffers of
// those reads, and goes away when their completions arrive.
var errRingAbandoned = errors.New("io_uring: ring abandoned with reads in the kernel")

// newRing sets up a ring and probes what it needs. The error says why
// io_uring cannot be used here: an old kernel, kernel.io_uring_disabled, a
// seccomp filter, or too little locked memory.
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
	// The completion ring holds three completions for every read in
	// flight: a read, its no-wait half that failed, and a cancellation.
	p := iouringParams{flags: iouringSetupCQSize, cqEntries: uint32(o.cqEntries)}
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(o.Entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno == unix.EINVAL {
		p = iouringParams{}
		fd, _, errno = unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(o.Entries), uintptr(unsafe.Pointer(&p)), 0)
	}
	if errno != 0 {
		return nil, setupError(errno)
	}
	r := &Ring{fd: int(fd), reaped: make(chan struct{}), closeWait: o.CloseWait, skipCQE: p.features&iouringFeatCQESkip != 0}
	if err := r.mapRings(&p); err != nil {
		r.unmap()
		return nil, err
	}
	if err := r.probe(); err != nil {
		r.unmap()
		return nil, err
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		r.unmap()
		return nil, fmt.Errorf("io_uring: eventfd: %w", err)
	}
	if _, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), iouringRegisterEventFD, uintptr(unsafe.Pointer(&efd)), 1, 0, 0); errno != 0 {
		unix.Close(efd)
		r.unmap()
		return nil, fmt.Errorf("io_uring: registering the eventfd: %w", errno)
	}
	r.event = os.NewFile(uintptr(efd), "io_uring-eventfd")
	kfd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		r.event.Close()
		r.unmap()
		return nil, fmt.Errorf("io_uring: eventfd: %w", err)
	}
	r.lazyKick = os.NewFile(uintptr(kfd), "io_uring-submit-eventfd")
	// Reads in flight are bounded by the submission ring, and so that
	// every read, its no-wait half and a cancellation for each fit in the
	// completion ring. Should more come (a cancellation that finds its
	// read already done, and a reaper that lags), the kernel keeps them
	// on its overflow list, and drain flushes it.
	n := int(min(p.sqEntries, p.cqEntries/3))
	if o.inFlight > 0 {
		n = o.inFlight
	}
	r.ops = make([]ringOp, n)
	r.free = make([]uint32, n)
	for i := range n {
		r.free[i] = uint32(i)
		r.ops[i].done = make(chan int32, 1)
	}
	r.queue = make([]uint32, 0, n)
	r.gates = make(map[uint64]*fileGate)
	r.slots = make(chan struct{}, n)
	r.kick = make(chan struct{}, 1)
	r.closing = make(chan struct{})
	r.submitterUp = make(chan struct{})
	r.stopSubmit = make(chan struct{})
	r.submitted = make(chan struct{})
	r.setWorkersLocked(o.Workers)
	go r.submitter()
	go r.relay()
	<-r.submitterUp // the cap is applied before any read
	go r.reap()
	return r, nil
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

// probe checks that the kernel knows IORING_OP_READ (and so, older,
// IORING_OP_ASYNC_CANCEL).
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

func (r *Ring) unmap() {
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

// setWorkers changes the io-wq cap (and with it the reads of one file in
// flight at most), as a reload with another stat_workers does.
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

// busy reports the operations in flight (submitted, queued or abandoned
// and not yet completed) and the descriptors with reads in flight.
func (r *Ring) busy() (ops, files int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.slots), len(r.gates)
}

// eagerBelow is the number of reads in the kernel under which a new read
// wakes the submitter at once rather than through the netpoller: with
// fewer, the disk may be idle while the read waits for the scheduler.
const eagerBelow = 4

// wake makes the submitter look at the queues at once.
func (r *Ring) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// wakeForRead wakes the submitter for a read just queued: at once if the
// kernel has few reads (inKernel, read under r.mu by the caller), or else
// through the netpoller. Only the first reader since the submitter last
// woke writes the eventfd; the others' reads are in the queue it takes.
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

// relay waits on the eventfd through the netpoller and wakes the
// submitter, until the ring is torn down (which closes the eventfd).
func (r *Ring) relay() {
	var b [8]byte
	for {
		if _, err := r.lazyKick.Read(b[:]); errors.Is(err, os.ErrClosed) {
			return
		} else if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			// The eventfd cannot fail while the ring is open; should it,
			// wake the submitter anyway rather than leave reads queued.
			time.Sleep(time.Millisecond)
		}
		r.wake()
	}
}

// submitter makes every submission from one OS thread. It never unlocks
// the thread: when it returns (after the ring is torn down, nothing in
// flight) the thread exits, and its io-wq with it.
func (r *Ring) submitter() {
	runtime.LockOSThread()
	defer close(r.submitted)
	r.submit()
	close(r.submitterUp)
	for {
		select {
		case <-r.kick:
			// Cleared before the queues are taken: a reader that queues
			// after this writes the eventfd again, one that queued before
			// is taken.
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
			// Best effort: Linux before 5.15 has no io-wq limit, and reads
			// still work. Registered from this thread, the limit is its
			// io-wq's (and, since 5.15, the ring's for any later task).
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
			// than two entries: the disk reads the no-wait halves start wait
			// in the plug until the whole batch is in, so each half fails
			// (its data is locked, not read yet) rather than race a fast
			// disk and return the data unnoticed, and the disk is signalled
			// once. No-ops that post nothing make up a short batch.
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
		r.entered.Add(int64(reads))
		r.noWaitFirst.Add(int64(noWait))
		r.enter()
		if !more {
			return
		}
	}
}

// enter hands the kernel what the submission ring holds. Entries it does
// not take stay there for the next call.
func (r *Ring) enter() {
	for tries := 0; tries < 1000; tries++ {
		pending := atomic.LoadUint32(r.sqTail) - atomic.LoadUint32(r.sqHead)
		if pending == 0 {
			return
		}
		r.enters.Add(1)
		_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(pending), 0, 0, 0, 0)
		switch errno {
		case 0, unix.EINTR:
		case unix.EAGAIN, unix.EBUSY:
			// Out of memory for requests, or completions not reaped yet:
			// the reaper runs meanwhile.
			time.Sleep(time.Millisecond)
		default:
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// readAt reads len(buf) bytes of the file fd at off through the ring. The
// calling goroutine parks until the read completes, holding no thread. A
// short count is what the kernel returned; readFull goes on after it.
func (r *Ring) readAt(fd int, buf []byte, off int64) (int, error) {
	return r.readOnce(context.Background(), fd, buf, off, nil)
}

// ReadLending reads len(buf) bytes of the file fd at off through the
// ring, in the shape of prewarm.ReaderAt: it goes on after short reads
// and stops short, with a nil error, only at the end of the file. If ctx
// ends while the kernel has the read, hold is called (see
// readOptions.Hold) and ReadLending returns at once, leaving buf to the
// ring. A read that the ring fails for its own reasons is done with
// pread instead (preadIfRingFailed).
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

// readFull reads len(buf) bytes at off, going on after a short read from
// where it stopped. It stops short only where a read returns 0 bytes (the
// end of the file, or of what is left of it) or fails; whether that is
// truncation is the caller's to say, who knows the size. A short read of
// a file without a block device is finished with pread: on Linux 6.18 the
// kernel retries a short direct-I/O FUSE read through io_uring into the
// rest of the buffer from the starting offset (so the buffer would repeat
// the start of the span) and does not report it short.
func (r *Ring) readFull(ctx context.Context, fd int, buf []byte, off int64, o *readOptions) (int, error) {
	done := 0
	for done < len(buf) {
		n, err := r.readOnce(ctx, fd, buf[done:], off+int64(done), o)
		done += n
		if err != nil || n == 0 {
			return done, err
		}
		if done < len(buf) && o != nil && o.NoBlockDevice {
			m, err := preadFull(fd, buf[done:], off+int64(done))
			return done + m, err
		}
	}
	return done, nil
}

// preadFull reads with pread until buf is full, the end of the file
// (a short count, nil error), or an error.
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

// readOnce submits one read of len(buf) bytes at off and waits for it, or
// for ctx to end. Then a read the submitter has not taken yet is dropped
// unsent; one the kernel has is cancelled and, with o.Hold, left to the
// ring (readOnce returns ctx's error at once), or else waited for.
func (r *Ring) readOnce(ctx context.Context, fd int, buf []byte, off int64, o *readOptions) (int, error) {
	if len(buf) == 0 {
		return 0, nil
	}
	return r.read(ctx, fd, buf, off, o, nil)
}

// readLent is readFull into a buffer that lend gives only once the read
// has its turn (its file's bound and a slot of the ring): readers
// waiting for a stalled file hold no buffer. It returns that buffer,
// whose first n bytes were read, or nil if lend was not called or
// failed.
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

func (r *Ring) read(ctx context.Context, fd int, buf []byte, off int64, o *readOptions, lend func(context.Context) ([]byte, error)) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return 0, errRingClosed
	}
	key := uint64(fd) | 1<<63
	if o != nil && o.File != 0 {
		key = o.File &^ (1 << 63)
	}
	g := r.gates[key]
	if g == nil {
		g = &fileGate{key: key, sem: make(chan struct{}, r.perFile)}
		r.gates[key] = g
	}
	g.users++
	r.mu.Unlock()
	// The file's bound first, then the ring's: readers of a hung file
	// wait at their file's gate and leave the ring's slots to others.
	var err error
	select {
	case g.sem <- struct{}{}:
		select {
		case r.slots <- struct{}{}:
		case <-ctx.Done():
			err = ctx.Err()
		case <-r.closing:
			err = errRingClosed
		}
		if err != nil {
			<-g.sem
		}
	case <-ctx.Done():
		err = ctx.Err()
	case <-r.closing:
		err = errRingClosed
	}
	if err == nil && lend != nil {
		if buf, err = lend(ctx); err == nil && len(buf) == 0 {
			err = errors.New("io_uring: lent an empty buffer")
		}
		if err != nil {
			<-g.sem
			<-r.slots
		}
	}
	r.mu.Lock()
	if err == nil && r.closed {
		err = errRingClosed
		<-g.sem
		<-r.slots
	}
	if err != nil {
		r.leaveGateLocked(g)
		r.mu.Unlock()
		return 0, err
	}
	idx := r.free[len(r.free)-1]
	r.free = r.free[:len(r.free)-1]
	op := &r.ops[idx]
	op.gen = (op.gen + 1) & genMask
	op.state = opQueued
	op.fd, op.off, op.buf, op.gate = int32(fd), uint64(off), buf, g
	op.flags = 0
	if o != nil && o.NoBlockDevice {
		op.flags = iosqeAsync
	}
	op.noWaitFirst, op.metDisk = false, false
	if o != nil && o.NoWaitFirst {
		o.NoWaitFirst = false
		op.noWaitFirst = r.skipCQE && !o.NoBlockDevice
	}
	r.queue = append(r.queue, idx)
	inKernel := r.inKernel
	r.mu.Unlock()
	r.wakeForRead(inKernel)

	var res int32
	var gone error
	select {
	case res = <-op.done:
	case <-ctx.Done():
		gone = ctx.Err()
	case <-r.closing:
		// close has cancelled the read: a reader that can let go does.
		gone = errRingClosed
	}
	if gone != nil {
		r.mu.Lock()
		switch op.state {
		case opQueued:
			// Not submitted yet: it never will be.
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
			if o != nil && o.Hold != nil {
				op.abandoned = true
				op.release = o.Hold()
				r.mu.Unlock()
				r.wake()
				return 0, gone
			}
			r.mu.Unlock()
			r.wake()
		default: // opDone: the result is there
			r.mu.Unlock()
		}
		res = <-op.done
	}
	r.mu.Lock()
	if op.metDisk && o != nil {
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

// reap waits for completions on the eventfd, through the netpoller, and
// hands each to its waiting reader. Once the ring is closed and nothing is
// left in the kernel, it tears the ring down.
func (r *Ring) reap() {
	var b [8]byte
	for {
		_, err := r.event.Read(b[:])
		if r.drain() {
			r.teardown()
			return
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			// The eventfd cannot fail while the ring is open; should it,
			// poll rather than leave completions unreaped.
			time.Sleep(10 * time.Millisecond)
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
			// Completions the ring had no room for wait on the kernel's
			// overflow list, and every later one behind them, until an
			// enter with GETEVENTS moves them in: without it, their reads
			// and all that follow would never return.
			if atomic.LoadUint32(r.sqFlags)&iouringSQCQOverflow == 0 {
				break
			}
			r.overflows.Add(1)
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
					r.metDisk.Add(1)
				}
				continue
			}
			r.inKernel--
			res := c.res
			if r.failNext.Load() > 0 && r.failNext.Add(-1) >= 0 {
				res = -int32(unix.ECANCELED)
			}
			if res > 1 && r.shortNext.Load() > 0 && r.shortNext.Add(-1) >= 0 {
				res /= 2
			}
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

// teardown ends the submitter and frees the ring, once nothing is in the
// kernel.
func (r *Ring) teardown() {
	close(r.stopSubmit)
	<-r.submitted
	r.lazyKick.Close() // ends relay
	r.event.Close()
	r.unmap()
	close(r.reaped)
}

// injectFailures makes the next n reads fail as if the kernel had
// cancelled them, for tests of the fallback.
func (r *Ring) injectFailures(n int) { r.failNext.Store(int32(n)) }

// injectShortReads makes the next n reads report half the bytes they
// read, for tests of short reads.
func (r *Ring) injectShortReads(n int) { r.shortNext.Store(int32(n)) }

// close cancels the reads in flight and waits for their completions, at
// most CloseWait; then the ring is torn down. Reads after close fail with
// errRingClosed. If the kernel still has reads after CloseWait (a hung
// device, a FUSE server that ignores interrupts), close returns
// errRingAbandoned and leaves the ring mapped, with those reads' buffers
// and descriptors, rather than unmap memory the kernel may still write;
// it is torn down when the last of them completes.
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
	// Wake the reaper, which tears the ring down once it is idle.
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

// torndown is closed once a closed ring is torn down.
func (r *Ring) torndown() <-chan struct{} { return r.reaped }

// ringSupported is true where the io_uring engine is compiled in.
const ringSupported = true
