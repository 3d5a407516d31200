package transmit

import (
	"context"
	"net"
	"net/http"
	"sync"
)

// A response's head and its body leave in one write. net/http writes an
// HTTP/1 response through a 4 KiB buffer, so a larger body leaves in two
// writes or more, each a TCP segment, where nginx corks its headers into
// one. While flash_serve copies a body, the listener wrapper's connection
// gathers the writes, up to heldMax bytes, and sends them in one write:
// when the next would pass heldMax (with it, in one writev), when the body
// is written (releaseHead), or before a sendfile, whose headers then leave
// with MSG_MORE in the segment of its first bytes (headerFirst).

// heldMax is the most bytes a connection gathers.
const heldMax = 64 << 10

var heldPool = sync.Pool{New: func() any { b := make([]byte, 0, heldMax); return &b }}

// connCtxKey keys the listener wrapper's connection in a request context:
// a *conn, nil where the server has the wrapper but the connection is not
// one it made or can find (TLS; a wrapper listed before it; one listed
// after it that does not give its inner connection with Raw), and no value
// where the server has no wrapper at all.
type connCtxKey struct{}

// withConn puts the wrapper's connections in their requests' contexts,
// and a nil *conn in the others' of a server that lists the wrapper. A
// connection of a wrapper listed after this one (proxy_protocol's), which
// passes writes and ReadFrom on to the one it wraps, is looked through.
func withConn(ctx context.Context, c net.Conn) context.Context {
	// A few levels at most: a Raw that returned its own connection would
	// otherwise keep the server from accepting.
	for range 4 {
		if cc, ok := c.(*conn); ok {
			return context.WithValue(ctx, connCtxKey{}, cc)
		}
		w, ok := c.(interface{ Raw() net.Conn })
		if !ok {
			break
		}
		c = w.Raw()
	}
	return context.WithValue(ctx, connCtxKey{}, (*conn)(nil))
}

// noWrapper reports whether r came to a server without the listener
// wrapper. Nothing below its writers can send a flash_serve body with
// sendfile then: net/http's connection knows *os.File only, and copies
// anything else through a buffer it allocates for each body.
func noWrapper(r *http.Request) bool {
	return r.Context().Value(connCtxKey{}) == nil
}

// holdHead makes the connection of r, if the listener wrapper made it and
// r is cleartext HTTP/1, gather its writes until releaseHead (which the
// caller must call, also on a panic), and returns it.
func holdHead(r *http.Request) *conn {
	if r.ProtoMajor != 1 || r.TLS != nil {
		return nil
	}
	c, _ := r.Context().Value(connCtxKey{}).(*conn)
	if c == nil {
		return nil
	}
	c.armed.Store(true)
	return c
}

// releaseHead ends what holdHead started, and sends what is gathered.
func (c *conn) releaseHead() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed.Store(false)
	return c.flushHeld(false)
}

// Write implements net.Conn: while armed, writes are gathered.
func (c *conn) Write(p []byte) (int, error) {
	if !c.armed.Load() {
		return c.TCPConn.Write(p)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	held := 0
	if c.held != nil {
		held = len(*c.held)
	}
	switch {
	case held+len(p) <= heldMax && c.armed.Load():
		if c.held == nil {
			c.held = heldPool.Get().(*[]byte)
		}
		*c.held = append(*c.held, p...)
		return len(p), nil
	case held == 0:
		return c.TCPConn.Write(p)
	}
	// One write for what is gathered and p.
	c.iov = [2][]byte{*c.held, p}
	bufs := net.Buffers(c.iov[:])
	n, err := bufs.WriteTo(c.TCPConn)
	c.iov = [2][]byte{}
	c.dropHeld()
	// The gathered bytes were reported written already.
	return int(max(0, n-int64(held))), err
}

// flushHeld sends what is held; c.mu is held. more: sendfile sends the
// next bytes at once, so the last partial segment may wait for them.
func (c *conn) flushHeld(more bool) error {
	if c.held == nil {
		return nil
	}
	var err error
	if more {
		err = c.writeMore(*c.held)
	} else {
		_, err = c.TCPConn.Write(*c.held)
	}
	c.dropHeld()
	return err
}

func (c *conn) dropHeld() {
	*c.held = (*c.held)[:0]
	heldPool.Put(c.held)
	c.held = nil
}
