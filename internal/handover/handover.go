// Package handover is test support: it tells which of Caddy's config
// generations accepted which client connection, so that a test or the
// soak can tell a connection a reload may drop from one it must not.
//
// What a reload can drop (Caddy v2.11.9: each config binds its own
// SO_REUSEPORT socket, the new one starts before the old one stops):
//   - a connection queued on the old socket that no server accepted is
//     reset when that socket closes;
//   - one the old server accepted is closed unanswered if it was idle, or
//     if its request is read after Shutdown began;
//   - a request read before Shutdown began is answered in full.
//
// Importing the package registers the listener wrapper "accept_log
// <generation>", to be put first in listener_wrappers; clients dial with
// Dial, from ports of their own, and ask Explain about a drop.
package handover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func init() { caddy.RegisterModule(new(AcceptLog)) }

// AcceptLog is the listener wrapper "accept_log <generation>": it records
// which generation accepted each client port, and returns the connections
// unwrapped, so that the wrappers after it see what they would without it.
type AcceptLog struct {
	// Generation is the config's number; a newer config has a larger one.
	Generation int `json:"generation,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (*AcceptLog) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "caddy.listeners.accept_log", New: func() caddy.Module { return new(AcceptLog) }}
}

// UnmarshalCaddyfile sets up the wrapper: accept_log <generation>.
func (a *AcceptLog) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()
	if !d.NextArg() {
		return d.ArgErr()
	}
	n, err := strconv.Atoi(d.Val())
	if err != nil {
		return d.Errf("generation: %v", err)
	}
	a.Generation = n
	return nil
}

// WrapListener implements caddy.ListenerWrapper.
func (a *AcceptLog) WrapListener(ln net.Listener) net.Listener {
	if addr, ok := ln.Addr().(*net.TCPAddr); ok {
		log.mu.Lock()
		log.newest[addr.Port] = max(log.newest[addr.Port], a.Generation)
		log.mu.Unlock()
	}
	return &listener{Listener: ln, gen: a.Generation}
}

type listener struct {
	net.Listener
	gen int
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			log.mu.Lock()
			log.accepted[a.Port] = l.gen
			log.mu.Unlock()
		}
	}
	return c, err
}

var log = struct {
	mu       sync.Mutex
	accepted map[int]int // client port → the generation that accepted it
	newest   map[int]int // server port → the newest generation listening on it
}{accepted: map[int]int{}, newest: map[int]int{}}

// Reset forgets what was recorded, for a new server.
func Reset() {
	log.mu.Lock()
	log.accepted, log.newest = map[int]int{}, map[int]int{}
	log.mu.Unlock()
}

// AcceptedBy returns the generation that accepted the connection from
// clientPort, if one did.
func AcceptedBy(clientPort int) (gen int, ok bool) {
	log.mu.Lock()
	defer log.mu.Unlock()
	gen, ok = log.accepted[clientPort]
	return gen, ok
}

// Verdict is what Explain says of a connection closed before any response.
type Verdict int

const (
	// ByNewest: the newest generation accepted it and closed it unanswered,
	// which no handover explains.
	ByNewest Verdict = iota
	// NeverAccepted: no server accepted it; the old socket's close reset it.
	NeverAccepted
	// ByReplaced: a generation a newer one replaced accepted it.
	ByReplaced
)

// Explain says whether a handover explains that the connection from
// clientPort to serverPort was closed before any response: it does if no
// server accepted it or a replaced generation did.
func Explain(clientPort, serverPort int) (Verdict, int) {
	log.mu.Lock()
	defer log.mu.Unlock()
	gen, ok := log.accepted[clientPort]
	switch {
	case !ok:
		return NeverAccepted, 0
	case gen < log.newest[serverPort]:
		return ByReplaced, gen
	default:
		return ByNewest, gen
	}
}

// IsDrop reports whether err is a connection closed or reset the way a
// handover closes one: ECONNRESET, EPIPE, or EOF before the first byte of
// the response (not ErrUnexpectedEOF, a response cut short).
func IsDrop(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF)
}

// ports hands out local ports below the kernel's ephemeral range, each
// once per 12,000 connections, so that a record names one connection.
var ports atomic.Int64

// Dial connects to addr over TCP from a local port of its own, skipping
// ports still taken (a connection in TIME_WAIT, another program), and
// forgets what the log said of that port before.
func Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	for range 1000 {
		port := 20000 + int(ports.Add(1)%12000)
		log.mu.Lock()
		delete(log.accepted, port)
		log.mu.Unlock()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}}
		c, err := d.DialContext(ctx, network, addr)
		if errors.Is(err, syscall.EADDRINUSE) || errors.Is(err, syscall.EADDRNOTAVAIL) {
			continue
		}
		if err != nil {
			// The port is the caller's to explain a reset at connect.
			return nil, &DialError{Port: port, Err: err}
		}
		return c, nil
	}
	return nil, fmt.Errorf("handover: no free local port in 1000 tries")
}

// DialError is a failed connect from Port.
type DialError struct {
	Port int
	Err  error
}

func (e *DialError) Error() string { return fmt.Sprintf("connect from port %d: %v", e.Port, e.Err) }
func (e *DialError) Unwrap() error { return e.Err }
