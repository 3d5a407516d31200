package transmit

import (
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// ReadError is a failure to read the file, as opposed to a failure to
// write to the client. The response can then no longer be completed
// honestly: the caller must abort the connection rather than pad the body.
type ReadError struct {
	Offset int64
	Err    error
}

func (e *ReadError) Error() string {
	return fmt.Sprintf("reading file at offset %d: %v", e.Offset, e.Err)
}

func (e *ReadError) Unwrap() error { return e.Err }

// errTruncated is the ReadError cause when the file ended before the
// length the response declared.
var errTruncated = pagecache.ErrTruncated

// Copy buffers. HTTP/1.1 over TLS gets large ones, so that a write fills
// whole TLS records; HTTP/2 and HTTP/3 cut the body into frames of 16 KiB
// or less anyway, so a smaller buffer pins less memory per stream.
const (
	copyBufferSize      = 64 << 10
	smallCopyBufferSize = 32 << 10
)

var (
	bufPool      = sync.Pool{New: func() any { b := make([]byte, copyBufferSize); return &b }}
	smallBufPool = sync.Pool{New: func() any { b := make([]byte, smallCopyBufferSize); return &b }}
)

// copyPool returns the pool of r's copy buffers and their size.
func copyPool(r *http.Request) (*sync.Pool, int64) {
	if r.ProtoMajor >= 2 {
		return &smallBufPool, smallCopyBufferSize
	}
	return &bufPool, copyBufferSize
}

// copyWith writes n bytes of f from off to w through a buffer of pool. It
// reads with pread (ReadAt), so a descriptor shared by concurrent
// responses is never moved.
func copyWith(pool *sync.Pool, w io.Writer, f io.ReaderAt, off, n int64) (int64, error) {
	bp := pool.Get().(*[]byte)
	defer pool.Put(bp)
	buf := *bp
	var written int64
	for written < n {
		chunk := buf[:min(int64(len(buf)), n-written)]
		nr, rerr := f.ReadAt(chunk, off+written)
		if nr > 0 {
			nw, werr := w.Write(chunk[:nr])
			written += int64(nw)
			if werr != nil {
				return written, werr
			}
		}
		if err := pagecache.ShortRead(nr, len(chunk), rerr); err != nil {
			return written, &ReadError{Offset: off + written, Err: err}
		}
	}
	return written, nil
}
