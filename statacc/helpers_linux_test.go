package statacc

// Helpers more than one of statacc's Linux test files use.

import (
	"errors"
	"io/fs"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// openCounter counts the opens of the files of one directory, as the
// kernel reports them (inotify's IN_OPEN on the directory).
type openCounter struct {
	fd int
}

func countOpens(t *testing.T, dir string) *openCounter {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	// IN_CLOSE too: the kernel merges an event identical to the last one
	// queued, so two opens in a row with only IN_OPEN watched would count
	// once.
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_OPEN|unix.IN_CLOSE); err != nil {
		t.Fatal(err)
	}
	return &openCounter{fd: fd}
}

// opens returns how many times name was opened since the last call. The
// kernel queues the event during the open itself, so every open made
// before the call is counted.
func (o *openCounter) opens(t *testing.T, name string) int {
	t.Helper()
	n := 0
	buf := make([]byte, 64<<10)
	for {
		got, err := unix.Read(o.fd, buf)
		if errors.Is(err, unix.EAGAIN) {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= got; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			raw := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_OPEN != 0 && ev.Mask&unix.IN_ISDIR == 0 && cString(raw) == name {
				n++
			}
		}
	}
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// firstLookupOpens writes dir/page.html, looks it up once and returns how
// many times the lookup opened it.
func firstLookupOpens(t *testing.T, c *Cache, dir string) int {
	t.Helper()
	write(t, filepath.Join(dir, "page.html"), "hello")
	return lookupOpens(t, c, dir)
}

// lookupOpens looks dir/page.html (which holds "hello") up once and
// returns how many times the lookup opened it.
func lookupOpens(t *testing.T, c *Cache, dir string) int {
	t.Helper()
	oc := countOpens(t, dir)
	if got := describe(t, c, filepath.Join(dir, "page.html")); got != "5:hello" {
		t.Fatalf("%q", got)
	}
	return oc.opens(t, "page.html")
}

// errClass names what a server answers for a lookup error.
func errClass(err error) string {
	switch {
	case err == nil:
		return "ok"
	case IsRefused(err):
		return "refused"
	case errors.Is(err, syscall.ENOTDIR):
		return "enotdir"
	case errors.Is(err, fs.ErrNotExist):
		return "missing"
	case errors.Is(err, fs.ErrPermission):
		return "permission"
	}
	return "other: " + err.Error()
}

// untilStopped calls step with 0, 1, 2... until stop is closed, then
// marks wg done.
func untilStopped(wg *sync.WaitGroup, stop <-chan struct{}, step func(i int)) {
	defer wg.Done()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		step(i)
	}
}
