package fileio

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestNoBlockDeviceOfTmpfs: a file on tmpfs (an anonymous device) has no
// block device, by its FileInfo and by its descriptor alike, and a
// FileInfo without a stat is not said to be on one.
func TestNoBlockDeviceOfTmpfs(t *testing.T) {
	var sf unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &sf); err != nil || uint32(sf.Type) != unix.TMPFS_MAGIC {
		t.Skipf("/dev/shm is not tmpfs here (%v)", err)
	}
	f, err := os.CreateTemp("/dev/shm", "fileio")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if !NoBlockDevice(info) || !NoBlockDeviceFD(int(f.Fd())) {
		t.Errorf("a tmpfs file: NoBlockDevice %v, NoBlockDeviceFD %v; want true, true", NoBlockDevice(info), NoBlockDeviceFD(int(f.Fd())))
	}
	if NoBlockDeviceFD(-1) {
		t.Error("NoBlockDeviceFD(-1) = true, want false")
	}
}
