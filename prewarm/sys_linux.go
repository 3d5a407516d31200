//go:build linux && !flashserve_portable

package prewarm

import (
	"context"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/flashserve/caddy-flash-serve/statacc"
)

// warmFile brings the first n bytes of a file into the page cache: an
// fadvise(WILLNEED) starts the readahead for the whole span, and reads
// through it make sure it has landed before the file counts as warm.
// readPrefix closes f.
func warmFile(ctx context.Context, path string, n int64, readAt ReaderAt) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	// RANDOM turns the kernel's own readahead off for this descriptor, so
	// that exactly the budgeted pages are read, no more.
	unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM)
	unix.Fadvise(int(f.Fd()), 0, n, unix.FADV_WILLNEED)
	return readPrefix(ctx, f, n, readAt)
}

// FileResidency asks mincore(2) which pages of the file are resident,
// where mincore tells this process the truth (statacc.MincoreTrusted);
// for other files it reports the residency as not known.
func FileResidency(path string) (Residency, error) {
	r := Residency{Path: path}
	f, err := os.Open(path)
	if err != nil {
		return r, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return r, err
	}
	r.Size = info.Size()
	if !statacc.MincoreTrusted(int(f.Fd()), info) {
		return r, nil
	}
	r.Known = true
	if r.Size == 0 {
		return r, nil
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(r.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return r, err
	}
	defer unix.Munmap(m)
	vec := make([]byte, (r.Size+pageSize-1)/pageSize)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)),
		uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		return r, errno
	}
	for i, v := range vec {
		if v&1 != 0 {
			r.Resident += min(pageSize, r.Size-int64(i)*pageSize)
		}
	}
	return r, nil
}

// Evict drops a file from the page cache (fadvise DONTNEED), for tests and
// benchmarks of a cold start.
func Evict(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}
