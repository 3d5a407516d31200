//go:build linux && !flashserve_portable

package transmit

import (
	"fmt"
	"io"
	"net"

	"golang.org/x/sys/unix"
)

// sendfileBuilt: the wrapper's connections send bodies with sendfile.
const sendfileBuilt = true

// maxSendfileCall bounds one sendfile call, for fairness between
// connections, as nginx's sendfile_max_chunk does.
const maxSendfileCall = 2 << 20

// sendfileCall is unix.Sendfile; tests make it refuse.
var sendfileCall = unix.Sendfile

func newConn(tc *net.TCPConn) net.Conn { return &conn{TCPConn: tc} }

// writeMore writes p with MSG_MORE, as nginx's tcp_nopush does for a
// header: the kernel keeps the last partial segment for sendfile's first
// bytes, so that they leave together. EAGAIN parks the goroutine on the
// netpoller, under the write deadline.
func (c *conn) writeMore(p []byte) error {
	rc, err := c.TCPConn.SyscallConn()
	if err != nil {
		return err
	}
	for len(p) > 0 {
		var n int
		var serr error
		err := rc.Write(func(fd uintptr) bool {
			for {
				n, serr = unix.SendmsgN(int(fd), p, nil, nil, unix.MSG_MORE|unix.MSG_NOSIGNAL)
				if serr != unix.EINTR {
					break
				}
			}
			return serr != unix.EAGAIN
		})
		if err != nil {
			return err
		}
		if serr != nil {
			return &net.OpError{Op: "write", Net: "tcp", Err: serr}
		}
		if n <= 0 {
			return io.ErrShortWrite
		}
		p = p[n:]
	}
	return nil
}

// sendfile sends up to limit bytes of src at its explicit offset. On
// EAGAIN, RawConn.Write parks the goroutine on the netpoller under the
// write deadline, which every call after progress renews. A refusal by
// the kernel (EINVAL, ENOSYS, EOPNOTSUPP) returns the bytes sent before it
// with an error wrapping errRefused.
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
		err := rc.Write(func(fd uintptr) bool {
			for {
				n, serr = sendfileCall(int(fd), src.FD, &src.Off, chunk)
				if serr != unix.EINTR {
					break
				}
			}
			return serr != unix.EAGAIN
		})
		if n > 0 {
			written += int64(n)
			src.N -= int64(n)
			stats.sendfileBytes.Add(int64(n))
		}
		stats.sendfileCalls.Add(1)
		if serr == unix.EINVAL || serr == unix.ENOSYS || serr == unix.EOPNOTSUPP {
			return written, fmt.Errorf("%w: %w", errRefused, serr)
		}
		src.ZeroCopy = true
		switch {
		case err != nil: // the deadline, or the connection closed
			return written, err
		case serr == unix.EIO || serr == unix.EOVERFLOW:
			return written, &ReadError{Offset: src.Off, Err: serr}
		case serr != nil:
			return written, &net.OpError{Op: "sendfile", Net: "tcp", Err: serr}
		case n == 0:
			// sendfile reads nothing past the end of the file: it shrank.
			return written, &ReadError{Offset: src.Off, Err: errTruncated}
		}
	}
	return written, nil
}
