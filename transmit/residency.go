package transmit

// NoWaitProbe tells whether spans of an open file are in the page cache
// without mincore(2), which reports every page resident to a process that
// neither owns the file nor may write it. It reads a byte at each end of a
// span with preadv2(RWF_NOWAIT), which fails with EAGAIN instead of
// waiting for the disk. The read at a span's end takes the next byte too,
// so that a file probed span after span costs about one system call per
// span.
//
// Two limits: a missing page between two cached ends is not seen (the
// read that meets it waits for the disk), and a no-wait read of a missing
// page starts the kernel's readahead there, as the read that follows
// would. The zero value is not usable: set FD.
type NoWaitProbe struct {
	FD int
	// next is one more than an offset the last probe found cached, 0 for
	// none: a span that starts there needs no read for its start.
	next int64
}

// Resident returns n when the bytes at off and at off+n-1 are both in the
// page cache, and 0 when either is not (or cannot be read without
// waiting: a file system without RWF_NOWAIT, the end of the file).
func (p *NoWaitProbe) Resident(off, n int64) int64 {
	if n <= 0 {
		return 0
	}
	var b [2]byte
	known := p.next == off+1
	p.next = 0
	if !known && !cachedByte(p.FD, b[:1], off) {
		return 0
	}
	if n == 1 {
		return 1
	}
	k := cachedBytes(p.FD, b[:], off+n-1)
	if k == 0 {
		return 0
	}
	if k == 2 {
		p.next = off + n + 1
	}
	return n
}

func cachedByte(fd int, b []byte, off int64) bool { return cachedBytes(fd, b, off) == len(b) }
