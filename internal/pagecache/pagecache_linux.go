//go:build linux && !flashserve_portable

package pagecache

import (
	"errors"
	"io/fs"
	"math/bits"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// euid is read once: Trusted runs on every miss, and Caddy does not change
// its user after it starts.
var euid = os.Geteuid()

// Trusted reports whether mincore(2) tells this process the truth about
// which pages of the open file fd (described by info) are in the page
// cache. Since Linux 5.0 it does only for the file's owner or a process
// that may write the file, and reports every page resident to anyone
// else: a server serving files someone else owns would see cold data as
// cached. Write access costs one faccessat2 with the effective ids.
func Trusted(fd int, info fs.FileInfo) bool {
	if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) == euid {
		return true
	}
	err := unix.Faccessat2(fd, "", unix.W_OK, unix.AT_EACCESS|unix.AT_EMPTY_PATH)
	if errors.Is(err, unix.ENOSYS) {
		// Before Linux 5.8: x/sys's Faccessat then checks the mode bits
		// against the effective ids itself, which needs a path.
		err = unix.Faccessat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.W_OK, unix.AT_EACCESS)
	}
	// Any refusal leaves the file untrusted: probing it without mincore
	// costs a few system calls, trusting a lying mincore blocking reads.
	return err == nil
}

// residentPrefix reports how many of the n bytes of fd from off are in the
// page cache, up to the first page that is not. Ask it only of a Trusted
// file.
func residentPrefix(fd int, off, n int64) (int64, error) {
	if n <= 0 {
		return 0, nil
	}
	if allCached(fd, off, n) {
		return n, nil
	}
	var small [64]byte
	vec, start, err := mincore(fd, off, n, small[:])
	if err != nil {
		return 0, err
	}
	return residentFrom(vec, start, off, n), nil
}

// Count reports how many of the first size bytes of fd are in the page
// cache, wherever they are. Ask it only of a Trusted file.
func Count(fd int, size int64) (int64, error) {
	if size <= 0 {
		return 0, nil
	}
	if allCached(fd, 0, size) {
		return size, nil
	}
	vec, _, err := mincore(fd, 0, size, nil)
	if err != nil {
		return 0, err
	}
	var resident int64
	for i, v := range vec {
		if v&1 != 0 {
			resident += min(pageSize, size-int64(i)*pageSize)
		}
	}
	return resident, nil
}

// noCachestat is set once cachestat(2) answered ENOSYS (before Linux 6.5).
var noCachestat atomic.Bool

// allCached reports whether every page that holds the n > 0 bytes of fd
// from off is in the page cache, with one cachestat(2): no mapping, and
// the page cache walked folio by folio where mincore looks up each page,
// which is far slower for a large file. false when any page is missing or
// cachestat cannot tell: mincore then says where. Ask it only of a
// Trusted file.
func allCached(fd int, off, n int64) bool {
	if noCachestat.Load() {
		return false
	}
	start := off / pageSize * pageSize
	r := unix.CachestatRange{Off: uint64(start), Len: uint64(off + n - start)}
	var cs unix.Cachestat_t
	_, _, errno := unix.Syscall6(unix.SYS_CACHESTAT, uintptr(fd), uintptr(unsafe.Pointer(&r)), uintptr(unsafe.Pointer(&cs)), 0, 0, 0)
	if errno != 0 {
		if errno == unix.ENOSYS {
			noCachestat.Store(true)
		}
		return false
	}
	asked.cachestats.Add(1)
	return int64(cs.Cache) >= (int64(r.Len)+pageSize-1)/pageSize
}

// WholeCached reports whether the first n bytes of fd are all in the page
// cache, asking cachestat(2), which starts no read, where a no-wait read
// of a missing page starts readahead. known is false where cachestat
// cannot tell: before Linux 6.5, or for a file that is not Trusted.
func WholeCached(fd int, n int64, trusted bool) (cached, known bool) {
	cached, known = cachestatWhole(fd, n, trusted)
	if known && !cached && onOverlay(fd) {
		// cachestat reads the file's own mapping, which overlayfs leaves
		// empty: its pages are the lower file's, which mincore sees
		// through a mapping.
		got, err := Count(fd, n)
		return got >= n, err == nil
	}
	return cached, known
}

// onOverlay reports whether fd is a file on overlayfs (one fstatfs).
func onOverlay(fd int) bool {
	var st unix.Statfs_t
	return unix.Fstatfs(fd, &st) == nil && uint32(st.Type) == unix.OVERLAYFS_SUPER_MAGIC
}

func cachestatWhole(fd int, n int64, trusted bool) (cached, known bool) {
	if !trusted || noCachestat.Load() {
		return false, false
	}
	if n == 0 {
		return true, true
	}
	r := unix.CachestatRange{Len: uint64(n)}
	var cs unix.Cachestat_t
	_, _, errno := unix.Syscall6(unix.SYS_CACHESTAT, uintptr(fd), uintptr(unsafe.Pointer(&r)), uintptr(unsafe.Pointer(&cs)), 0, 0, 0)
	if errno != 0 {
		if errno == unix.ENOSYS {
			noCachestat.Store(true)
		}
		return false, false
	}
	asked.cachestats.Add(1)
	return int64(cs.Cache) >= (n+pageSize-1)/pageSize, true
}

// mincore returns the residency vector of the pages that hold the n > 0
// bytes of fd from off (bit 0 set for a resident page) and the offset of
// its first page, in buf when it is large enough.
func mincore(fd int, off, n int64, buf []byte) (vec []byte, start int64, err error) {
	start = off / pageSize * pageSize
	length := off + n - start
	asked.mincores.Add(1)
	m, err := unix.Mmap(fd, start, int(length), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, 0, err
	}
	defer unix.Munmap(m)
	if pages := (length + pageSize - 1) / pageSize; pages <= int64(len(buf)) {
		vec = buf[:pages]
	} else {
		vec = make([]byte, pages)
	}
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(length), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		return nil, 0, errno
	}
	return vec, start, nil
}

// ReadNoWait reads into buf at off only what the page cache holds, with
// preadv2(RWF_NOWAIT): it never waits for the disk, and fails with EAGAIN
// when the first page is not resident (EOPNOTSUPP where the file system
// cannot tell, as FUSE). It calls the kernel directly, the iovec on the
// stack, so that it allocates nothing.
func ReadNoWait(fd int, buf []byte, off int64) (int, error) {
	if len(buf) == 0 {
		return 0, nil
	}
	iov := unix.Iovec{Base: &buf[0]}
	iov.SetLen(len(buf))
	// The offset as low and high words (high is 0 on 64-bit machines).
	lo, hi := uintptr(off), uintptr(uint64(off)>>(bits.UintSize-1)>>1)
	for {
		n, _, errno := unix.Syscall6(unix.SYS_PREADV2, uintptr(fd), uintptr(unsafe.Pointer(&iov)), 1, lo, hi, unix.RWF_NOWAIT)
		switch errno {
		case 0:
			return int(n), nil
		case unix.EINTR:
			continue
		}
		return 0, errno
	}
}

// ReadNoWaitMetDisk is ReadNoWait that also tells whether the calling
// thread submitted a disk read during the call (for the pages read, or
// the readahead after them): on a VM a no-wait read of a missing page can
// start the disk read and see it complete within the call, and return the
// bytes, but the request waited for the disk and counts of cold bodies
// must say so. The thread's count of blocks read in tells; the goroutine
// is locked to its thread between the two counts so that they are the
// same thread's. A read quicker than any disk read (readNoDisk) is not
// asked about: that saves the second count on bodies the page cache
// holds.
func ReadNoWaitMetDisk(fd int, buf []byte, off int64) (n int, diskRead bool, err error) {
	if len(buf) == 0 {
		return 0, false, nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, counted := blocksReadInFunc()
	start := time.Now()
	n, err = ReadNoWait(fd, buf, off)
	if counted && time.Since(start) >= readNoDisk {
		after, ok := blocksReadInFunc()
		diskRead = ok && after != before
	}
	return n, diskRead, err
}

// readNoDisk is less than any read that met a disk takes, more than a
// copy of 64 KiB from the page cache. A variable for the tests.
var readNoDisk = 4 * time.Microsecond

// blocksReadInFunc is threadBlocks, a variable for the tests.
var blocksReadInFunc = threadBlocks

// threadBlocks is the calling thread's count of blocks read in (see
// threadReads) and whether the kernel answered.
func threadBlocks() (int64, bool) {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_THREAD, &ru) != nil {
		return 0, false
	}
	return int64(ru.Inblock), true
}

// threadReads is a thread's count of blocks read in (getrusage), which
// the kernel adds to when the thread submits a read to a block device,
// readahead included, with the thread's id. A kernel without task I/O
// accounting counts nothing, and every no-wait answer stands.
type threadReads struct {
	tid    int
	blocks int64
}

// blocksReadIn is the calling thread's threadReads (a var for tests).
var blocksReadIn = threadBlocksReadIn

func threadBlocksReadIn() threadReads {
	blocks, ok := threadBlocks()
	if !ok {
		return threadReads{}
	}
	return threadReads{tid: unix.Gettid(), blocks: blocks}
}

// Prefetch starts reading the first n bytes of fd into the page cache
// (fadvise WILLNEED) and turns the kernel's own readahead off for the
// descriptor (fadvise RANDOM), so that its reads bring in what they ask
// for and no more.
func Prefetch(fd int, n int64) {
	unix.Fadvise(fd, 0, 0, unix.FADV_RANDOM)
	unix.Fadvise(fd, 0, n, unix.FADV_WILLNEED)
}

// Evict drops the file's clean pages from the page cache (fadvise
// DONTNEED), for tests and benchmarks of a cold start.
func Evict(fd int) error { return unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED) }

// PrefetchRange starts reading n bytes of fd from off into the page cache
// (fadvise WILLNEED), for a reader that advises a large file window by
// window instead of all of it at once (Prefetch).
func PrefetchRange(fd int, off, n int64) { unix.Fadvise(fd, off, n, unix.FADV_WILLNEED) }

// InMemoryFS reports whether the open file fd, described by info, is on a
// filesystem that keeps its files in memory (tmpfs, ramfs): no read of it
// waits for a disk, so it needs no residency probe, and tmpfs refuses
// RWF_NOWAIT reads, which would leave a probe three system calls. Only
// files without a block device are asked, with one fstatfs each: an
// answer kept per device number would outlive its mount, as the number is
// given to the next filesystem mounted.
func InMemoryFS(fd int, info fs.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok || unix.Major(st.Dev) != 0 {
		return false
	}
	var sf unix.Statfs_t
	if err := unix.Fstatfs(fd, &sf); err != nil {
		return false
	}
	// The magic as 32 bits: Type is an int32 on 32-bit machines, where
	// RAMFS_MAGIC is negative.
	t := uint32(sf.Type)
	return t == unix.TMPFS_MAGIC || t == unix.RAMFS_MAGIC
}
