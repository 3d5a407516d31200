//go:build linux && !flashserve_portable

package transmit

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxSendfileCall bounds one sendfile call, for fairness between
// connections, as nginx's sendfile_max_chunk (2m) does: a larger turn
// (sendfile_max_chunk, through Caddy's write chunk) makes several calls.
// A raw call holds its P for as long as it lasts (about 0.5 ms for 2 MiB
// on loopback), which this bound keeps short.
const maxSendfileCall = 2 << 20

// sendfileCall is unix.Sendfile and rawSendfileCall its raw form; tests
// replace them to make the kernel refuse.
var (
	sendfileCall    = unix.Sendfile
	rawSendfileCall = rawSendfile
)

func newConn(tc *net.TCPConn) net.Conn { return &conn{TCPConn: tc} }

// sendfile sends up to limit bytes of src at its offset. The socket is
// non-blocking: on EAGAIN, RawConn.Write parks the goroutine on the
// netpoller until the socket drains, under the connection's write
// deadline, instead of holding a thread. Every call that follows progress
// renews that deadline (see renewer).
//
// A call whose pages are known to be in the page cache is made raw
// (src.rawCall, probe.go: the P stays with the thread); after one that
// did not end in a wait for the socket, the goroutine yields to the
// network poller (yieldToNetpoll), as nginx goes back to its event loop
// after each sendfile_max_chunk, so that other connections on the same P
// are answered between two chunks.
//
// A refusal by the kernel (EINVAL, ENOSYS, EOPNOTSUPP: a file or socket
// sendfile cannot take) returns the bytes sent before it with an error
// wrapping errRefused.
func (c *conn) sendfile(src *fileSource, limit int64, ren *renewer) (int64, error) {
	rc, err := c.TCPConn.SyscallConn()
	if err != nil {
		return 0, err
	}
	var written int64
	for written < limit {
		if written > 0 {
			c.renew(ren, written)
		}
		chunk := int(min(limit-written, maxSendfileCall))
		var n int
		var serr error
		var raw, waited bool
		err := rc.Write(func(fd uintptr) bool {
			// Asked at every attempt: a wait for the socket can outlast
			// what was known of the pages.
			raw = src.rawCall(int64(chunk), time.Now()) && netpollYielder() != nil
			call := sendfileCall
			if raw {
				call = rawSendfileCall
			}
			for {
				n, serr = call(int(fd), src.FD, &src.Off, chunk)
				if serr != unix.EINTR {
					break
				}
			}
			if serr == unix.EAGAIN {
				waited = true
				return false
			}
			return true
		})
		if n > 0 {
			written += int64(n)
			src.N -= int64(n)
			stats.sendfileBytes.Add(int64(n))
		}
		stats.sendfileCalls.Add(1)
		if raw {
			stats.sendfileRawCalls.Add(1)
		}
		if serr == unix.EINVAL || serr == unix.ENOSYS || serr == unix.EOPNOTSUPP {
			return written, fmt.Errorf("%w: %w", errRefused, serr)
		}
		src.ZeroCopy = true
		switch {
		case err != nil: // the deadline, or the connection closed under us
			return written, err
		case serr == unix.EIO || serr == unix.EOVERFLOW:
			return written, &ReadError{Offset: src.Off, Err: serr}
		case serr != nil:
			return written, &net.OpError{Op: "sendfile", Net: "tcp", Err: serr}
		case n == 0:
			// sendfile reads nothing past the end of the file: it shrank.
			return written, &ReadError{Offset: src.Off, Err: errTruncated}
		}
		if raw && !waited {
			// Also after the last chunk: the caller (the ring's engine,
			// between two resident runs) may go on with more.
			yieldToNetpoll()
		}
	}
	return written, nil
}

// rawSendfile is sendfile(2) as a raw system call: the scheduler is not
// told, so it neither takes the P away nor wakes a thread for it. Only
// for calls that cannot block (see rawCall).
func rawSendfile(out, in int, off *int64, count int) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_SENDFILE, uintptr(out), uintptr(in), uintptr(unsafe.Pointer(off)), uintptr(count), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// The yielder is an eventfd on the netpoller. A goroutine that makes raw
// sendfile calls keeps its P, and runtime.Gosched would run it again
// without a look at the network, which then only the scheduler's monitor
// polls, every 10 ms: a small request on another connection would wait
// for that. yieldToNetpoll instead parks the goroutine until an event it
// posts itself comes back through the netpoller, that is until the
// scheduler's next poll of the network, which readies every connection
// that has something to say (nginx's epoll_wait between two chunks). It
// costs a write and that poll, without a thread switch.
var yielder struct {
	once sync.Once
	f    *os.File
	rc   syscall.RawConn
}

// netpollYielder returns the yielder's connection, nil if it could not be
// made (the raw path is then not taken).
func netpollYielder() syscall.RawConn {
	yielder.once.Do(func() {
		fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
		if err != nil {
			return
		}
		// A non-blocking descriptor is registered with the netpoller.
		f := os.NewFile(uintptr(fd), "flash_serve-yield")
		rc, err := f.SyscallConn()
		if err != nil {
			f.Close()
			return
		}
		yielder.f, yielder.rc = f, rc
	})
	return yielder.rc
}

// yieldToNetpoll parks the goroutine until the scheduler's next poll of
// the network. RawConn.Read clears the descriptor's readiness before it
// calls the function: the event posted in the first call (a write to the
// eventfd, which the edge-triggered poller reports on every write) is the
// one that ends the wait, even if another thread's poll takes it before
// the goroutine parks. The counter is never read: an eventfd stays
// writable for 2^64-2 writes. Goroutines that yield at once take turns on
// the descriptor's read lock, which is itself a yield.
func yieldToNetpoll() {
	rc := netpollYielder()
	if rc == nil {
		return
	}
	posted := false
	rc.Read(func(fd uintptr) bool {
		if posted {
			return true
		}
		posted = true
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		// Raw too: a write to an eventfd does not wait.
		_, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&one[0])), uintptr(len(one)))
		return e != 0 // nothing posted: do not wait for it
	})
	// The poll that readied this goroutine may have readied others with
	// it, into this P's queue; go after them rather than before.
	runtime.Gosched()
}

// prepareConns makes what the wrapped connections' raw calls need before
// the first connection arrives.
func prepareConns() { netpollYielder() }
