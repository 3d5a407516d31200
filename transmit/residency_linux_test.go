//go:build linux && !flashserve_portable

package transmit

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestNoWaitProbe: a span is resident when both its ends are in the page
// cache, and not when either is missing; a span's end read carries the
// next span's start; the end of the file is not resident; no allocation.
// mincore (this process owns the file, so it tells the truth) is asked
// before every no-wait read of the same pages, since such a read of a
// missing page brings it in.
func TestNoWaitProbe(t *testing.T) {
	const span = 2 << 20
	size := int64(3*span + 100)
	f, _ := testFile(t, int(size))
	evict(t, f)
	fd := int(f.Fd())
	// No readahead on this descriptor: a read brings in what it asks for.
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_RANDOM); err != nil {
		t.Fatal(err)
	}
	resident := func(off int64) bool {
		n, err := ResidentPrefix(fd, off, 1)
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	if n, _ := ResidentPrefix(fd, 0, size); n != 0 {
		t.Fatalf("%d bytes resident after DONTNEED: the test would prove nothing", n)
	}
	p := NoWaitProbe{FD: fd}
	if n := p.Resident(0, span); n != 0 {
		t.Errorf("cold file: Resident(0, 2 MiB) = %d, want 0", n)
	}

	// The start cached, the end not.
	head := make([]byte, 64<<10)
	if _, err := f.ReadAt(head, 0); err != nil {
		t.Fatal(err)
	}
	if !resident(0) || resident(span-1) {
		t.Fatalf("after reading 64 KiB: first page resident %v, page at 2 MiB-1 resident %v; want true, false", resident(0), resident(span-1))
	}
	if n := p.Resident(0, span); n != 0 {
		t.Errorf("start cached, end missing: Resident(0, 2 MiB) = %d, want 0", n)
	}

	// All of it cached: every span resident, each start known from the
	// previous span's end read.
	whole := make([]byte, size)
	if _, err := f.ReadAt(whole, 0); err != nil {
		t.Fatal(err)
	}
	if n, _ := ResidentPrefix(fd, 0, size); n != size {
		t.Fatalf("after reading it all, mincore sees %d of %d bytes", n, size)
	}
	p = NoWaitProbe{FD: fd}
	for off := int64(0); off < size; off += span {
		n := min(span, size-off)
		if got := p.Resident(off, n); got != n {
			t.Errorf("warm file: Resident(%d, %d) = %d", off, n, got)
		}
		if want := off + n + 1; off+n < size && p.next != want {
			t.Errorf("after the span at %d, next = %d, want %d (the next span's start known)", off, p.next, want)
		}
	}
	if p.next != 0 {
		t.Errorf("after the last span, next = %d: nothing past the end is known", p.next)
	}
	if n := p.Resident(size, 10); n != 0 {
		t.Errorf("past the end: Resident = %d, want 0", n)
	}
	if n := p.Resident(5, 1); n != 1 {
		t.Errorf("one cached byte: Resident = %d, want 1", n)
	}
	if a := testing.AllocsPerRun(100, func() { p.Resident(0, span) }); a != 0 {
		t.Errorf("a probe allocates %v times", a)
	}

	// A descriptor that cannot be read without waiting says not resident.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if n := (&NoWaitProbe{FD: int(r.Fd())}).Resident(0, 10); n != 0 {
		t.Errorf("a pipe: Resident = %d, want 0", n)
	}
}
