package transmit

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// A writer after flash_serve's in the chain (encode, a plugin's wrapper)
// may answer differently depending on how the body is cut into writes:
// zstd, for one, ends a block at every flush of what it was given, so one
// write of a whole small file and file_server's way (a 512-byte sniff,
// then the rest through ReadFrom) give different bytes. Under such a
// writer (Transfer.FileServerWrites) the body is written the way
// file_server writes it: io.CopyN from a reader of the file, as
// http.ServeContent does.

// sendLikeFileServer writes length bytes of the body from start with
// io.CopyN, the call http.ServeContent makes: a writer with ReadFrom gets
// the reader, any other gets 32 KiB writes. The reader of a file is a
// *fileSource without the cached head, so that every read is filled as a
// file's is; on a cleartext HTTP/1.x connection through the listener
// wrapper it still leaves with sendfile if the writers pass ReadFrom
// down. It reports the bytes written and the engine that sent them.
func (s *Sender) sendLikeFileServer(w http.ResponseWriter, body Body, eng Engine, start, length int64) (int64, Engine, error) {
	if eng == EngineMemory {
		n, err := io.CopyN(w, bytes.NewReader(body.Data()[start:start+length]), length)
		return n, EngineMemory, err
	}
	if eng == EngineIOUring {
		rr := ringReaderPool.Get().(*ringReader)
		*rr = ringReader{ring: s.Ring, fd: body.FD(), off: start, n: length, eng: EngineCopy}
		n, err := io.CopyN(w, rr, length)
		eng := rr.eng
		rr.release()
		return n, eng, err
	}
	src := sourcePool.Get().(*fileSource)
	*src = fileSource{File: body.File(), FD: body.FD(), Off: start, N: length}
	defer func() {
		*src = fileSource{}
		sourcePool.Put(src)
	}()
	n, err := io.CopyN(w, src, length)
	if err == io.EOF {
		err = &ReadError{Offset: start + n, Err: errTruncated}
	}
	if src.ZeroCopy {
		return n, EngineSendfile, err
	}
	return n, EngineCopy, err
}

// ringReader reads a body through the io_uring ring for io.CopyN, a
// chunk at a time into a pooled buffer; every Read is filled whole, as a
// file's is, so that the writes that follow are file_server's.
type ringReader struct {
	ring   *Ring
	fd     int
	off, n int64 // the next offset to read into buf, and the bytes left to read
	bufp   *[]byte
	buf    []byte // read and not yet handed out
	eng    Engine // EngineIOUring, or EngineCopy if every read fell back to pread
	err    error
}

var ringReaderPool = sync.Pool{New: func() any { return new(ringReader) }}

func (rr *ringReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if len(rr.buf) == 0 {
			if rr.err != nil {
				break
			}
			if rr.n <= 0 {
				rr.err = io.EOF
				break
			}
			rr.fill()
			continue
		}
		k := copy(p[n:], rr.buf)
		rr.buf = rr.buf[k:]
		n += k
	}
	if n == 0 {
		return 0, rr.err
	}
	return n, nil
}

// fill reads the next chunk through the ring, or with pread when the
// ring itself failed (preadIfRingFailed).
func (rr *ringReader) fill() {
	if rr.bufp == nil {
		rr.bufp = coldBufPool.Get().(*[]byte)
	}
	buf := (*rr.bufp)[:min(int64(len(*rr.bufp)), rr.n)]
	ctx := context.Background()
	k, err := rr.ring.readFull(ctx, rr.fd, buf, rr.off, nil)
	k, err, redone := preadIfRingFailed(ctx, rr.fd, buf, rr.off, k, err)
	if !redone {
		rr.eng = EngineIOUring
	}
	if err := pagecache.ShortRead(k, len(buf), err); err != nil {
		rr.err = &ReadError{Offset: rr.off + int64(k), Err: err}
	}
	rr.buf = buf[:k]
	rr.off += int64(k)
	rr.n -= int64(k)
}

func (rr *ringReader) release() {
	if rr.bufp != nil {
		coldBufPool.Put(rr.bufp)
	}
	*rr = ringReader{}
	ringReaderPool.Put(rr)
}
