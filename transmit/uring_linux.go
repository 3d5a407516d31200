//go:build linux && !flashserve_portable

package transmit

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The io_uring ABI (include/uapi/linux/io_uring.h), as much as the Ring
// uses: one opcode, the eventfd, the probe and the io-wq limit.
const (
	iouringOffSQRing = 0
	iouringOffCQRing = 0x8000000
	iouringOffSQEs   = 0x10000000

	iouringFeatSingleMmap = 1 << 0

	iouringOpRead = 22 // Linux 5.6

	iouringEnterGetEvents = 1 << 0

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

// Ring is a small io_uring of our own: reads of files into buffers, with
// completions reaped by one goroutine that waits on an eventfd through the
// netpoller. A goroutine waiting for a read parks on a channel, so a read
// from a cold disk holds no OS thread; the kernel's io-wq workers, capped
// at Options.Workers, do the blocking.
type Ring struct {
	fd     int
	sqRing []byte
	cqRing []byte
	sqes   []sqe

	sqHead, sqTail, sqMask, sqArray *uint32
	cqHead, cqTail, cqMask          *uint32
	cqes                            []cqe

	mu      sync.Mutex // guards submission and ops' free list
	ops     []ringOp
	free    []uint32
	slots   chan struct{} // one token per operation in flight
	closed  bool
	pending sync.WaitGroup

	event  *os.File // the eventfd, on the netpoller
	reaped chan struct{}

	// failNext makes the next completions fail with ECANCELED, to test
	// the fallback.
	failNext atomic.Int32
}

type ringOp struct {
	buf  []byte // kept referenced until the kernel is done with it
	done chan int32
}

// RingOptions size a Ring.
type RingOptions struct {
	// Entries is the number of reads in flight at most. Default: 256.
	Entries int
	// Workers caps the kernel's io-wq workers that block on the disk
	// (IORING_REGISTER_IOWQ_MAX_WORKERS). Default: 16.
	Workers int
}

// ErrRingClosed is returned by reads on a closed Ring.
var ErrRingClosed = errors.New("io_uring: ring closed")

// NewRing sets up a ring and probes what it needs. The error says why
// io_uring cannot be used here: an old kernel, kernel.io_uring_disabled, a
// seccomp filter, or too little locked memory.
func NewRing(o RingOptions) (*Ring, error) {
	if o.Entries <= 0 {
		o.Entries = 256
	}
	if o.Workers <= 0 {
		o.Workers = 16
	}
	var p iouringParams
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(o.Entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, setupError(errno)
	}
	r := &Ring{fd: int(fd), reaped: make(chan struct{})}
	if err := r.mapRings(&p); err != nil {
		r.unmap()
		return nil, err
	}
	if err := r.probe(); err != nil {
		r.unmap()
		return nil, err
	}
	// Best effort: Linux before 5.15 has no io-wq limit, and reads still work.
	limits := [2]uint32{uint32(o.Workers), uint32(o.Workers)}
	unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), iouringRegisterIOWQMaxWorker, uintptr(unsafe.Pointer(&limits)), 2, 0, 0)

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
	n := int(p.cqEntries)
	r.ops = make([]ringOp, n)
	r.free = make([]uint32, n)
	for i := range n {
		r.free[i] = uint32(i)
		r.ops[i].done = make(chan int32, 1)
	}
	r.slots = make(chan struct{}, min(n, int(p.sqEntries)))
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
	r.cqHead, r.cqTail, r.cqMask = u32(r.cqRing, p.cqOff.head), u32(r.cqRing, p.cqOff.tail), u32(r.cqRing, p.cqOff.ringMask)
	r.cqes = unsafe.Slice((*cqe)(unsafe.Pointer(&r.cqRing[p.cqOff.cqes])), p.cqEntries)
	return nil
}

// probe checks that the kernel knows IORING_OP_READ.
func (r *Ring) probe() error {
	var buf [16 + 256*8]byte
	if _, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), iouringRegisterProbe, uintptr(unsafe.Pointer(&buf[0])), 256, 0, 0); errno != 0 {
		return fmt.Errorf("io_uring: probing opcodes (Linux 5.6 or later needed): %w", errno)
	}
	lastOp := buf[0]
	if lastOp < iouringOpRead {
		return fmt.Errorf("io_uring: the kernel has no IORING_OP_READ (Linux 5.6 or later needed)")
	}
	flags := *(*uint16)(unsafe.Pointer(&buf[16+iouringOpRead*8+2]))
	if flags&iouringOpSupported == 0 {
		return fmt.Errorf("io_uring: IORING_OP_READ is not supported here")
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

// ReadAt reads len(buf) bytes of the file fd at off through the ring. The
// calling goroutine parks until the read completes, holding no thread.
func (r *Ring) ReadAt(fd int, buf []byte, off int64) (int, error) {
	if len(buf) == 0 {
		return 0, nil
	}
	r.slots <- struct{}{}
	defer func() { <-r.slots }()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return 0, ErrRingClosed
	}
	idx := r.free[len(r.free)-1]
	r.free = r.free[:len(r.free)-1]
	op := &r.ops[idx]
	op.buf = buf
	tail := atomic.LoadUint32(r.sqTail)
	mask := atomic.LoadUint32(r.sqMask)
	e := &r.sqes[tail&mask]
	*e = sqe{opcode: iouringOpRead, fd: int32(fd), off: uint64(off), addr: uint64(uintptr(unsafe.Pointer(&buf[0]))),
		len: uint32(len(buf)), userData: uint64(idx)}
	*(*uint32)(unsafe.Add(unsafe.Pointer(r.sqArray), uintptr(tail&mask)*4)) = tail & mask
	atomic.StoreUint32(r.sqTail, tail+1)
	r.pending.Add(1)
	var errno syscall.Errno
	for range 100 {
		var n uintptr
		n, _, errno = unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 1, 0, 0, 0, 0)
		if errno == 0 && n == 1 {
			break
		}
		if errno == 0 {
			errno = unix.EAGAIN
		}
		if errno != unix.EINTR && errno != unix.EAGAIN && errno != unix.EBUSY {
			break
		}
	}
	if errno != 0 {
		// The kernel did not take the entry: take it back, still under the
		// lock, so that no other submission saw the tail moved.
		atomic.StoreUint32(r.sqTail, tail)
		op.buf = nil
		r.free = append(r.free, idx)
		r.mu.Unlock()
		r.pending.Done()
		return 0, fmt.Errorf("io_uring: submitting a read: %w", errno)
	}
	r.mu.Unlock()
	res := <-op.done
	r.mu.Lock()
	op.buf = nil
	r.free = append(r.free, idx)
	r.mu.Unlock()
	if res < 0 {
		return 0, &os.PathError{Op: "io_uring read", Path: fmt.Sprint("fd ", fd), Err: syscall.Errno(-res)}
	}
	return int(res), nil
}

// reap waits for completions on the eventfd, through the netpoller, and
// hands each to its waiting reader.
func (r *Ring) reap() {
	defer close(r.reaped)
	var b [8]byte
	for {
		_, err := r.event.Read(b[:])
		r.drain()
		if err != nil {
			return // closed
		}
	}
}

func (r *Ring) drain() {
	for {
		head := atomic.LoadUint32(r.cqHead)
		tail := atomic.LoadUint32(r.cqTail)
		if head == tail {
			return
		}
		mask := atomic.LoadUint32(r.cqMask)
		for ; head != tail; head++ {
			c := r.cqes[head&mask]
			res := c.res
			if r.failNext.Load() > 0 && r.failNext.Add(-1) >= 0 {
				res = -int32(unix.ECANCELED)
			}
			r.ops[c.userData].done <- res
			r.pending.Done()
		}
		atomic.StoreUint32(r.cqHead, head)
	}
}

// InjectFailures makes the next n reads fail as if the kernel had
// cancelled them, for tests of the fallback.
func (r *Ring) InjectFailures(n int) { r.failNext.Store(int32(n)) }

// Close waits for the reads in flight, then tears the ring down. Reads
// after Close fail with ErrRingClosed.
func (r *Ring) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	r.pending.Wait()
	r.event.Close()
	<-r.reaped
	r.unmap()
	return nil
}

// ResidentPrefix reports how many of the n bytes of fd from off are in the
// page cache, counted from off up to the first page that is not, with
// mincore(2) over a temporary read-only mapping.
func ResidentPrefix(fd int, off, n int64) (int64, error) {
	if n <= 0 {
		return 0, nil
	}
	page := int64(os.Getpagesize())
	start := off / page * page
	length := off + n - start
	m, err := unix.Mmap(fd, start, int(length), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, err
	}
	defer unix.Munmap(m)
	pages := (length + page - 1) / page
	var small [64]byte
	vec := small[:0]
	if pages <= int64(len(small)) {
		vec = small[:pages]
	} else {
		vec = make([]byte, pages)
	}
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(length), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		return 0, errno
	}
	for i, v := range vec {
		if v&1 == 0 {
			return max(0, min(n, int64(i)*page+start-off)), nil
		}
	}
	return n, nil
}

// ReadNoWait reads at off only what the page cache holds, with
// preadv2(RWF_NOWAIT): it never waits for the disk, and fails with EAGAIN
// when the first page is not resident. One system call, where a mincore
// probe costs three (mmap, mincore, munmap, the last two under the
// process's mmap lock) and the read still to be done.
func ReadNoWait(fd int, buf []byte, off int64) (int, error) {
	iov := [1][]byte{buf}
	for {
		n, err := unix.Preadv2(fd, iov[:], off, unix.RWF_NOWAIT)
		if err == unix.EINTR {
			continue
		}
		if n < 0 {
			n = 0
		}
		return n, err
	}
}

// RingSupported is true where the io_uring engine is compiled in.
const RingSupported = true
