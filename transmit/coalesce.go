package transmit

import (
	"context"
	"net"
	"net/http"
	"sync"
)

// A response's head and its body leave in one write.
//
// net/http writes an HTTP/1 response through a 4 KiB buffer: a body of
// more than about 3.8 KiB leaves as two writes or more, the headers with
// the body's first bytes, then the rest. Each write is a TCP segment the
// kernel sends and, on loopback, delivers, so an 8 KiB file costs two
// sends where nginx, which corks its headers, makes one. While
// flash_serve copies a body to the connection (from memory, or read from
// the page cache), the listener wrapper's connection gathers the writes,
// up to heldMax bytes, and sends them in one write: when the next write
// would pass heldMax (with it, in one writev), when the body is written
// (releaseHead, also on a panic), or before a sendfile. A body sendfile
// sends has its headers held the same way (headerFirst), which then leave
// with MSG_MORE, in the segment of sendfile's first bytes.

// heldMax is the most bytes a connection gathers.
const heldMax = 64 << 10

var heldPool = sync.Pool{New: func() any { b := make([]byte, 0, heldMax); return &b }}

// connCtxKey is the request context's key for the listener wrapper's
// connection that the request came on.
type connCtxKey struct{}

// withConn is registered with each server that lists the listener
// wrapper: the connections the wrapper made are put in their requests'
// contexts, for holdHead.
func withConn(ctx context.Context, c net.Conn) context.Context {
	if cc, ok := c.(*conn); ok {
		return context.WithValue(ctx, connCtxKey{}, cc)
	}
	return ctx
}

// holdHead makes the connection of r, if the listener wrapper made it and
// r is cleartext HTTP/1, gather its writes until releaseHead, and returns
// it; nil if it does not. The caller must call releaseHead when the body
// is written, also on a panic.
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
	case !c.armed.Load() && held == 0:
		return c.TCPConn.Write(p)
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
	// The gathered bytes were reported written already; what p had sent
	// is what went past them.
	return int(max(0, n-int64(held))), err
}

// flushHeld sends what is held, if anything; c.mu is held. more says
// that sendfile sends the next bytes at once: the kernel may then keep
// the last partial segment for them (writeMore).
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
