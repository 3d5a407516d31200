//go:build linux && !flashserve_portable && !386 && !arm && !mips && !mipsle

package statacc

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/flashserve/caddy-flash-serve/internal/fusetest"
)

type smallFuseFile struct {
	fs.Inode
	content string
	direct  bool
}

func (f *smallFuseFile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode, out.Size, out.Mtime = syscall.S_IFREG|0o644, uint64(len(f.content)), 1_700_000_000
	return 0
}

func (f *smallFuseFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if f.direct {
		return nil, fuse.FOPEN_DIRECT_IO, 0
	}
	return nil, fuse.FOPEN_KEEP_CACHE, 0
}

func (f *smallFuseFile) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	end := min(int64(len(f.content)), off+int64(len(dest)))
	return fuse.ReadResultData([]byte(f.content[min(off, end):end])), 0
}

type smallFuseRoot struct {
	fs.Inode
	files map[string]*smallFuseFile
}

func (r *smallFuseRoot) OnAdd(ctx context.Context) {
	for name, f := range r.files {
		r.AddChild(name, r.NewPersistentInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG}), false)
	}
}

// TestSmallFuseFileKeptInMemoryFromAWorker: a small file on FUSE, whose
// no-wait reads are refused, is read whole by the worker of its miss and
// kept in memory, with or without direct I/O.
func TestSmallFuseFileKeptInMemoryFromAWorker(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE without fusermount needs root")
	}
	content := strings.Repeat("f", 8<<10)
	root := &smallFuseRoot{files: map[string]*smallFuseFile{
		"cached.css": {content: content},
		"direct.css": {content: content, direct: true},
	}}
	mnt, server := fusetest.Mount(t, root, fuse.MountOptions{DirectMount: true, FsName: "flashserve-test", Name: "small"})
	t.Cleanup(func() { server.Unmount() })
	c := New(Options{Workers: 1, Revalidate: time.Hour, MemoryBudget: 1 << 20})
	defer c.Close()
	for _, name := range []string{"cached.css", "direct.css"} {
		p := filepath.Join(mnt, name)
		for i := range 2 {
			e, err := c.Get(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			got := len(e.Data())
			if b, err := e.ReadAll(); err != nil || string(b) != content {
				t.Fatalf("%s: %v", name, err)
			}
			e.Release()
			if got != len(content) {
				t.Errorf("%s, lookup %d: %d bytes kept in memory, want %d", name, i, got, len(content))
			}
			c.Purge(p, false)
		}
	}
}
