package statacc

import (
	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// readHead reads the head of a file. Where the page cache can be asked it
// takes the head only if the page cache holds it (RWF_NOWAIT): a worker
// never waits for the disk for a head, and the body of a cold file is read
// through io_uring as a whole. Elsewhere it reads.
func readHead(f handle, fd int, head []byte) (int, error) {
	var n int
	var err error
	if pagecache.Supported {
		n, err = pagecache.ReadNoWait(fd, head, 0)
	} else {
		n, err = f.ReadAt(head, 0)
	}
	return n, pagecache.ShortRead(n, len(head), err)
}
