//go:build linux && !flashserve_portable

package transmit

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/flashserve/caddy-flash-serve/internal/fusetest"
)

// fuseByte is the content of the test FUSE files at off.
func fuseByte(off int64) byte { return byte(off*7 + off/251) }

// fuseFile is a FUSE file of size bytes whose reads can be made to block
// or to return short counts.
type fuseFile struct {
	fs.Inode
	size int64
	// maxRead, if set, is the most bytes one read returns.
	maxRead int
	// direct opens the file with FOPEN_DIRECT_IO, so that reads go to the
	// server as the caller made them, past the page cache.
	direct bool
	// block, if set, makes reads wait for it to close; ignoreCancel makes
	// them wait for nothing else (a server that ignores interrupts),
	// otherwise an interrupt ends them with EINTR.
	block        chan struct{}
	ignoreCancel bool
	started      atomic.Int64 // reads that reached the server
	blocked      atomic.Int64 // reads waiting in the server now
	finished     atomic.Int64 // reads that returned
}

func (f *fuseFile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o644
	out.Size = uint64(f.size)
	out.Mtime = 1_700_000_000
	return 0
}

func (f *fuseFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if f.direct {
		return nil, fuse.FOPEN_DIRECT_IO, 0
	}
	return nil, 0, 0
}

func (f *fuseFile) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f.started.Add(1)
	defer f.finished.Add(1)
	if f.block != nil {
		f.blocked.Add(1)
		var done <-chan struct{}
		if !f.ignoreCancel {
			done = ctx.Done()
		}
		select {
		case <-f.block:
		case <-done:
			f.blocked.Add(-1)
			return nil, syscall.EINTR
		}
		f.blocked.Add(-1)
	}
	n := min(int64(len(dest)), f.size-off)
	if f.maxRead > 0 {
		n = min(n, int64(f.maxRead))
	}
	n = max(n, 0)
	for i := range n {
		dest[i] = fuseByte(off + i)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

type fuseRoot struct {
	fs.Inode
	files map[string]*fuseFile
}

func (r *fuseRoot) OnAdd(ctx context.Context) {
	for name, f := range r.files {
		r.AddChild(name, r.NewPersistentInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG}), false)
	}
}

// mountFUSE mounts files in a temporary directory and returns it; the
// mount goes at the test's end, after every blocked read is let go.
func mountFUSE(t *testing.T, files map[string]*fuseFile) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE without fusermount needs root (CI runs as root)")
	}
	mnt, server := fusetest.Mount(t, &fuseRoot{files: files}, fuse.MountOptions{DirectMount: true, DisableSplice: true,
		FsName: "flashserve-test", Name: "ringtest", MaxBackground: 512})
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() {
			for _, f := range files {
				if f.block != nil {
					select {
					case <-f.block:
					default:
						close(f.block)
					}
				}
			}
			server.Unmount()
		})
	})
	return mnt
}

func openFUSE(t *testing.T, mnt, name string) *os.File {
	t.Helper()
	f, err := os.Open(filepath.Join(mnt, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
