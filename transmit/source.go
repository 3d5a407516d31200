package transmit

import (
	"io"
	"time"

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// fileSource is a response body: N bytes of a shared, open file from Off,
// read with pread so that one descriptor serves any number of concurrent
// responses. Handed to a ResponseWriter's ReadFrom, it travels down the
// writers to the connection, where the listener wrapper's connection
// recognises it under any number of *io.LimitedReader and sends it with
// sendfile(2) at an explicit offset. Anywhere else (TLS, HTTP/2, HTTP/3,
// encode) it is read like any reader.
type fileSource struct {
	File   io.ReaderAt
	FD     int
	Off, N int64
	// ZeroCopy: the connection has sent bytes with sendfile. Refused: the
	// kernel refused sendfile for this body; the connection copies the rest.
	ZeroCopy, Refused bool
	Sent              int64 // by either path
	// Idle is the response's write-idle policy, which the wrapped
	// connection applies within a sendfile turn.
	Idle idlePolicy
	// ReadTurn, if positive, is the most bytes Read returns after
	// StartTurn before io.EOF: a writer chain that copies the body then
	// returns after each turn, and Caddy's write-idle writer renews its
	// deadline before the next one, as for every chunk it writes itself.
	ReadTurn, turnLeft int64
}

// idlePolicy is Caddy's write-idle deadline for one response, which the
// wrapped connection keeps within a sendfile turn: Caddy sets it once per
// turn, and a turn can be far larger than its write chunk.
type idlePolicy struct {
	// Timeout is how long a write may make no progress (write_idle_timeout);
	// zero renews nothing.
	Timeout time.Duration
	// MinRate, if positive, is the rate in bytes per second the client
	// must keep over the whole body (write_min_rate): each byte sent adds
	// 1/MinRate seconds to the turn's deadline.
	MinRate int64
	// Ceiling, if set, is never passed (write_timeout).
	Ceiling time.Time
}

func (s *fileSource) StartTurn() { s.turnLeft = s.ReadTurn }

// Read implements io.Reader with pread. A file that ends before N bytes
// gives a *ReadError, never padding.
func (s *fileSource) Read(p []byte) (int, error) {
	if s.N <= 0 {
		return 0, io.EOF
	}
	if s.ReadTurn > 0 {
		if s.turnLeft <= 0 {
			return 0, io.EOF
		}
		if int64(len(p)) > s.turnLeft {
			p = p[:s.turnLeft]
		}
	}
	n, err := s.fill(p)
	s.Sent += int64(n)
	s.turnLeft -= int64(n)
	return n, err
}

// fill reads the next bytes of the body into p with pread and moves Off
// and N past them. Every byte comes from the file now, never from memory
// kept earlier (a write through a shared mapping sends no event).
func (s *fileSource) fill(p []byte) (int, error) {
	if int64(len(p)) > s.N {
		p = p[:s.N]
	}
	n, err := s.File.ReadAt(p, s.Off)
	s.Off += int64(n)
	s.N -= int64(n)
	if err := pagecache.ShortRead(n, len(p), err); err != nil {
		return n, &ReadError{Offset: s.Off, Err: err}
	}
	return n, nil
}

// findSource looks for a *fileSource under any depth of *io.LimitedReader
// (Caddy's and net/http's) and returns it with the smallest limit above it.
func findSource(r io.Reader) (src *fileSource, limit int64) {
	limit = -1
	for {
		switch v := r.(type) {
		case *fileSource:
			if limit < 0 || limit > v.N {
				limit = v.N
			}
			return v, limit
		case *io.LimitedReader:
			if limit < 0 || v.N < limit {
				limit = v.N
			}
			r = v.R
		default:
			return nil, 0
		}
	}
}

// consumed subtracts n from every *io.LimitedReader above the source.
func consumed(r io.Reader, n int64) {
	for {
		lr, ok := r.(*io.LimitedReader)
		if !ok {
			return
		}
		lr.N -= n
		r = lr.R
	}
}
