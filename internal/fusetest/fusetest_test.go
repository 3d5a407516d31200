//go:build linux

package fusetest

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// foreverFile is a direct-I/O file whose reads never answer, interrupts
// included.
type foreverFile struct{ fs.Inode }

func (f *foreverFile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode, out.Size = syscall.S_IFREG|0o644, 1<<20
	return 0
}

func (f *foreverFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (f *foreverFile) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	select {} // the hung disk
}

type foreverRoot struct{ fs.Inode }

func (r *foreverRoot) OnAdd(ctx context.Context) {
	r.AddChild("hung.bin", r.NewPersistentInode(ctx, &foreverFile{}, fs.StableAttr{Mode: syscall.S_IFREG}), false)
}

// TestCleanupLetsAHungReadGo leaves a read blocked in the kernel on a file
// whose server never answers, and checks that the cleanup Mount registers
// ends it (the read fails) and removes the mount, where an unmount alone
// is refused.
func TestCleanupLetsAHungReadGo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE without fusermount needs root (CI runs as root)")
	}
	var mnt string
	readDone := make(chan error, 1)
	t.Run("hung", func(t *testing.T) {
		var server *fuse.Server
		mnt, server = Mount(t, &foreverRoot{}, fuse.MountOptions{DirectMount: true, DisableSplice: true, FsName: "flashserve-test", Name: "forever"})
		t.Cleanup(func() { server.Unmount() }) // refused: a read is in flight
		f, err := os.Open(filepath.Join(mnt, "hung.bin"))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			_, err := f.ReadAt(make([]byte, 4096), 0)
			f.Close()
			readDone <- err
		}()
		time.Sleep(100 * time.Millisecond) // the read reaches the server
		select {
		case err := <-readDone:
			t.Fatalf("the read returned before the cleanup: %v", err)
		default:
		}
	})
	select {
	case err := <-readDone:
		if err == nil {
			t.Fatal("the hung read succeeded")
		}
		t.Logf("the hung read ended with %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the hung read is still blocked 10 s after the cleanup")
	}
	if _, ok := connection(mnt); ok {
		t.Fatalf("%s is still mounted", mnt)
	}
}
