package transmit

import (
	"io"
	"net"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func init() {
	caddy.RegisterModule(ListenerWrapper{})
}

// ListenerWrapper wraps raw TCP connections so that flash_serve's bodies
// leave with sendfile(2). Other connections (TLS, QUIC, unix sockets, other
// wrappers' types) pass through untouched, so it is safe in any position;
// it must come after any wrapper that replaces TCP connections with its own
// type (proxy_protocol), or it will see none.
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

// WrapListener implements caddy.ListenerWrapper.
func (ListenerWrapper) WrapListener(ln net.Listener) net.Listener {
	return &listener{Listener: ln}
}

// UnmarshalCaddyfile implements caddyfile.Unmarshaler. Syntax: flash_serve
// (no arguments, no block).
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

// Conn is a TCP connection that sends a *FileSource with sendfile.
type Conn struct {
	*net.TCPConn
}

// Stats count what the wrapped connections sent, process-wide.
var Stats struct {
	SendfileBytes, SendfileCalls, Fallbacks atomic.Int64
}

// ReadFrom implements io.ReaderFrom. net/http calls it with what the
// handler's ReadFrom passed down, after sending the headers and the first
// 512 bytes itself; it adds the count returned here to what it checks
// against Content-Length, so keep-alive survives.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	src, limit := findSource(r)
	if src == nil || limit <= 0 || src.FD < 0 {
		Stats.Fallbacks.Add(1)
		return c.TCPConn.ReadFrom(r)
	}
	n, err := c.sendfile(src, limit)
	consumed(r, n)
	src.Sent += n
	return n, err
}

// Interface guards
var (
	_ caddy.ListenerWrapper = (*ListenerWrapper)(nil)
	_ caddyfile.Unmarshaler = (*ListenerWrapper)(nil)
	_ io.ReaderFrom         = (*Conn)(nil)
)
