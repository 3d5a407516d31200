package transmit

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"syscall"

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// sendLikeFileServer writes length bytes of the body from start with
// io.CopyN, as http.ServeContent does, for a writer in front that is not
// the server's own (Transfer.FileServerWrites): such a writer may answer
// differently depending on how the body is cut into writes (zstd ends a
// block at every flush). Every Read is filled whole, as a file's is; a
// *fileSource still leaves with sendfile if the writers pass ReadFrom
// down. It reports the bytes written and the engine that sent them.
func (s *Sender) sendLikeFileServer(w http.ResponseWriter, r *http.Request, body Body, eng Engine, start, length int64) (int64, Engine, error) {
	if eng == EngineMemory {
		n, err := io.CopyN(w, bytes.NewReader(body.Data()[start:start+length]), length)
		return n, EngineMemory, err
	}
	if eng == EngineIOUring {
		rr := ringReaderPool.Get().(*ringReader)
		*rr = ringReader{s: s, ctx: r.Context(), src: body, fd: body.FD(), off: start, n: length, eng: EngineCopy,
			askCache: !s.ringOnly(), opts: readOptions{NoBlockDevice: body.NoBlockDevice(), File: body.FileID()}}
		n, err := io.CopyN(w, rr, length)
		eng := rr.eng
		rr.release()
		return n, eng, err
	}
	src := getSource(body, start, length)
	defer putSource(src)
	n, err := io.CopyN(w, src, length)
	if err == io.EOF {
		err = &ReadError{Offset: start + n, Err: errTruncated}
	}
	if src.ZeroCopy {
		return n, EngineSendfile, err
	}
	return n, EngineCopy, err
}

// ringReader reads a body through the ring for io.CopyN, each Read filled
// whole. It holds nothing across the caller's writes: a ring read brings a
// window into the page cache through a chunk of the budget, which goes
// back once the first bytes are copied out; the rest of the window is read
// with no-wait reads (a page evicted meanwhile goes back to the ring).
type ringReader struct {
	s         *Sender
	ctx       context.Context
	src       Body
	fd        int
	opts      readOptions
	off, n    int64 // the next offset to read, the bytes left
	windowEnd int64 // the bytes up to it were just read by the ring
	windowErr error // where that read stopped, returned once they are read
	// askCache: the page cache is asked first (not under the io_uring
	// policy, nor once it said the data is missing). pieces: it cannot be
	// asked (FUSE), so each ring read is the size of the caller's buffer.
	askCache, pieces bool
	eng              Engine // EngineIOUring, or EngineCopy if no byte came through the ring
	err              error
}

var ringReaderPool = sync.Pool{New: func() any { return new(ringReader) }}

func (rr *ringReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && rr.err == nil {
		if rr.n <= 0 {
			rr.err = io.EOF
			break
		}
		q := p[n:]
		q = q[:min(int64(len(q)), rr.n)]
		if inWindow := rr.off < rr.windowEnd; inWindow || rr.askCache {
			c := q
			if inWindow {
				c = c[:min(int64(len(c)), rr.windowEnd-rr.off)]
			}
			k, err := pagecache.ReadNoWait(rr.fd, c, rr.off)
			if k > 0 {
				rr.off += int64(k)
				rr.n -= int64(k)
				n += k
				continue
			}
			if err == nil {
				rr.err = &ReadError{Offset: rr.off, Err: errTruncated}
				break
			}
			if !errors.Is(err, syscall.EAGAIN) {
				rr.pieces = true
			}
			rr.askCache, rr.windowEnd = false, 0
		}
		if rr.windowErr != nil {
			rr.err = rr.windowErr
			break
		}
		want := min(coldChunk, rr.n)
		if rr.pieces {
			want = int64(len(q))
		}
		var cold coldRead
		buf, k, eng, err := rr.s.ringRead(rr.ctx, rr.src, &rr.opts, &cold, rr.off, want)
		if buf == nil {
			rr.err = err
			break
		}
		if eng == EngineIOUring {
			rr.eng = EngineIOUring
		}
		m := copy(q, buf[:k])
		cold.giveBack()
		rr.windowEnd, rr.windowErr = rr.off+int64(k), err
		rr.off += int64(m)
		rr.n -= int64(m)
		n += m
		if rr.pieces && err != nil {
			rr.err = err
		}
	}
	if n == 0 {
		return 0, rr.err
	}
	return n, nil
}

func (rr *ringReader) release() {
	*rr = ringReader{}
	ringReaderPool.Put(rr)
}
