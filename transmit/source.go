package transmit

import (
	"io"
	"os"
)

// FileSource is a response body: length bytes of a shared, open file from
// an offset. It reads with pread, never moving the descriptor's offset, so
// one descriptor can serve any number of concurrent responses.
//
// Handed to a ResponseWriter's ReadFrom, it travels down Caddy's and
// net/http's writers to the connection. A connection wrapped by the
// flash_serve listener wrapper recognises it there, under any number of
// *io.LimitedReader, and sends it with sendfile(2) at an explicit offset.
// Anywhere else (TLS, HTTP/2, HTTP/3, encode) it is read like any reader.
type FileSource struct {
	File *os.File
	// FD is File's descriptor, read once when the file was opened.
	FD int
	// Off is the next offset to send; N the bytes left.
	Off, N int64
	// ZeroCopy is set once the connection has sent bytes with sendfile.
	ZeroCopy bool
	// Sent counts the bytes sent so far, by either path.
	// Head, if set, holds the file's first bytes: reads within it are
	// served from memory. net/http reads the first 512 bytes of a body
	// through its own buffer before it calls ReadFrom, so a cached head
	// saves that pread on every response that starts at offset 0.
	Head []byte
	Sent int64
}

// Read implements io.Reader with pread. A file that ends before N bytes
// gives a *ReadError wrapping ErrTruncated, never padding.
func (s *FileSource) Read(p []byte) (int, error) {
	if s.N <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > s.N {
		p = p[:s.N]
	}
	if s.Off < int64(len(s.Head)) {
		n := copy(p, s.Head[s.Off:])
		s.Off += int64(n)
		s.N -= int64(n)
		s.Sent += int64(n)
		return n, nil
	}
	n, err := s.File.ReadAt(p, s.Off)
	s.Off += int64(n)
	s.N -= int64(n)
	s.Sent += int64(n)
	if n < len(p) {
		if err == nil || err == io.EOF {
			err = ErrTruncated
		}
		return n, &ReadError{Offset: s.Off, Err: err}
	}
	return n, nil
}

// findSource looks for a *FileSource under any depth of *io.LimitedReader
// (Caddy's write-idle chunking adds one, net/http's ReadFrom may add
// another) and returns it with the smallest limit above it.
func findSource(r io.Reader) (src *FileSource, limit int64) {
	limit = -1
	for {
		switch v := r.(type) {
		case *FileSource:
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

// consumed subtracts n from every *io.LimitedReader above the source, as
// reading through them would have.
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
