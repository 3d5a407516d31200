//go:build linux && !flashserve_portable

package statacc

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// kernelReportsAllResident evicts a file from the page cache and asks
// mincore how much of it is resident. To a process the kernel does not
// trust with the answer it is every page, however cold the file; to the
// others it is less, once the eviction has worked.
func kernelReportsAllResident(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, _ := f.Stat()
	size := int(info.Size())
	unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (size+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(size), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	for _, v := range vec {
		if v&1 == 0 {
			return false
		}
	}
	return true
}

// TestMincoreTrustedAsTheKernelDecides: an entry is trusted with mincore
// exactly when the kernel tells this process the truth: its own files
// (read-only ones too), files root may write, and not a root-owned file
// another user can only read.
func TestMincoreTrustedAsTheKernelDecides(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, make([]byte, 1<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		f, _ := os.Open(p)
		f.Sync()
		f.Close()
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := map[string]string{"own": write("own.bin", 0o644), "own, read-only": write("ro.bin", 0o444)}
	if os.Geteuid() == 0 {
		p := write("nobodys.bin", 0o444)
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		cases["another user's, read-only, as root"] = p
	} else {
		// A file this user neither owns nor may write: the test binary when
		// root built it (CI runs the tests as nobody that way), else
		// /etc/passwd.
		for _, p := range []string{os.Args[0], "/etc/passwd"} {
			var st unix.Stat_t
			if unix.Stat(p, &st) == nil && int(st.Uid) != os.Geteuid() && unix.Access(p, unix.W_OK) != nil {
				cases["root's, as "+p] = p
				break
			}
		}
	}
	c := New(Options{Workers: 1, NoInotify: true, MemoryBudget: -1})
	defer c.Close()
	for name, p := range cases {
		e, err := c.Get(context.Background(), p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		trusted := e.MincoreTrusted()
		e.Release()
		lies := kernelReportsAllResident(t, p)
		t.Logf("%s (%s): trusted %v, mincore reports every page resident after eviction: %v", name, p, trusted, lies)
		if trusted == lies {
			t.Errorf("%s: MincoreTrusted() = %v, but the kernel's mincore %s", name, trusted,
				map[bool]string{true: "reports every page resident (it does not tell this process)", false: "tells the truth"}[lies])
		}
	}
}
