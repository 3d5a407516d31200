package transmit

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	caddy.RegisterModule(ListenerWrapper{})
}

// ListenerWrapper wraps raw TCP connections so that flash_serve's bodies
// leave with sendfile(2). Other connections pass through untouched; it
// must be listed before any wrapper that replaces TCP connections with its
// own type (proxy_protocol): Caddy applies wrappers in the order listed,
// the first to the raw connection, so listed after one it sees none.
//
//	{
//		servers {
//			listener_wrappers {
//				flash_serve
//			}
//		}
//	}
type ListenerWrapper struct{}

// CaddyModule returns the Caddy module information.
func (ListenerWrapper) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "caddy.listeners.flash_serve",
		New: func() caddy.Module { return new(ListenerWrapper) },
	}
}

// Provision implements caddy.Provisioner: the server puts each
// connection the wrapper made in its requests' contexts (holdHead).
func (*ListenerWrapper) Provision(ctx caddy.Context) error {
	if srv, ok := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server); ok {
		srv.RegisterConnContext(withConn)
	}
	return nil
}

// WrapListener implements caddy.ListenerWrapper.
func (ListenerWrapper) WrapListener(ln net.Listener) net.Listener {
	return &listener{Listener: ln}
}

// UnmarshalCaddyfile implements caddyfile.Unmarshaler: flash_serve takes
// no arguments and no block.
func (*ListenerWrapper) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()
	if d.NextArg() {
		return d.ArgErr()
	}
	if d.NextBlock(0) {
		return d.Errf("the flash_serve listener wrapper takes no options")
	}
	return nil
}

type listener struct{ net.Listener }

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		return newConn(tc), nil
	}
	return c, nil
}

// conn is a TCP connection that sends a *fileSource with sendfile.
type conn struct {
	*net.TCPConn
	// wdl is the write deadline last set through the connection (Unix
	// nanoseconds, 0: none), which a turn's renewer extends.
	wdl atomic.Int64

	// armed is set while flash_serve writes a body (holdHead): writes are
	// gathered in held. mu guards held and iov; an unarmed connection
	// takes no lock.
	armed atomic.Bool
	mu    sync.Mutex
	held  *[]byte
	iov   [2][]byte
}

// SetWriteDeadline and SetDeadline implement net.Conn, noting the
// deadline for ReadFrom.
func (c *conn) SetWriteDeadline(t time.Time) error {
	c.noteWriteDeadline(t)
	return c.TCPConn.SetWriteDeadline(t)
}

func (c *conn) SetDeadline(t time.Time) error {
	c.noteWriteDeadline(t)
	return c.TCPConn.SetDeadline(t)
}

func (c *conn) noteWriteDeadline(t time.Time) {
	var ns int64
	if !t.IsZero() {
		ns = t.UnixNano()
	}
	c.wdl.Store(ns)
}

func (c *conn) writeDeadline() time.Time {
	if ns := c.wdl.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// ReadFrom implements io.ReaderFrom. net/http calls it with what the
// handler's ReadFrom passed down, after the headers (and the first 512
// bytes, unless headerFirst), and adds the count returned to what it
// checks against Content-Length, so keep-alive survives.
func (c *conn) ReadFrom(r io.Reader) (int64, error) {
	src, limit := findSource(r)
	if c.armed.Load() {
		// What is held leaves first, in sendfile's first segment.
		c.mu.Lock()
		c.armed.Store(false)
		err := c.flushHeld(src != nil && limit > 0 && src.FD >= 0 && !src.Refused)
		c.mu.Unlock()
		if err != nil {
			return 0, err
		}
	}
	if src != nil && limit == 0 {
		// A turn after the last byte: nothing to send or fall back from.
		return 0, nil
	}
	if src == nil || limit < 0 || src.FD < 0 {
		stats.fallbacks.Add(1)
		return c.TCPConn.ReadFrom(r)
	}
	ren := newRenewer(src.Idle, c.writeDeadline())
	var n int64
	var err error
	if !src.Refused {
		n, err = c.sendfile(src, limit, &ren)
		if errors.Is(err, errRefused) {
			// As Go's own sendfile does: copy from where it stopped.
			stats.refused.Add(1)
			src.Refused = true
			err = nil
		}
	}
	if err == nil && src.Refused && n < limit {
		var m int64
		m, err = c.copyTurn(src, limit-n, &ren, n)
		n += m
	}
	consumed(r, n)
	src.Sent += n
	return n, err
}

// errRefused: the kernel cannot sendfile from this file or to this socket.
var errRefused = errors.New("sendfile refused")

// copyTurn copies limit bytes of src to the connection, renewing the
// write deadline as the sendfile loop does; sent is what the turn sent.
func (c *conn) copyTurn(src *fileSource, limit int64, ren *renewer, sent int64) (int64, error) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	var written int64
	for written < limit {
		if sent+written > 0 {
			c.renew(ren, sent+written)
		}
		nr, rerr := src.fill(buf[:min(int64(len(buf)), limit-written)])
		nw, werr := c.TCPConn.Write(buf[:nr])
		written += int64(nw)
		if nw < nr {
			// Not sent: the next read is from the first unsent byte.
			src.Off -= int64(nr - nw)
			src.N += int64(nr - nw)
		}
		if werr != nil {
			return written, werr
		}
		if rerr != nil {
			return written, rerr
		}
	}
	return written, nil
}

// renew moves the write deadline on after sent bytes of the turn.
func (c *conn) renew(ren *renewer, sent int64) {
	if d, ok := ren.next(time.Now(), sent); ok {
		// Straight to the socket: the noted deadline stays the turn's.
		c.TCPConn.SetWriteDeadline(d)
	}
}

// Interface guards
var (
	_ caddy.ListenerWrapper = (*ListenerWrapper)(nil)
	_ caddy.Provisioner     = (*ListenerWrapper)(nil)
	_ caddyfile.Unmarshaler = (*ListenerWrapper)(nil)
	_ io.ReaderFrom         = (*conn)(nil)
)
