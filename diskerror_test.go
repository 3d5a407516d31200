//go:build linux

package flashserve

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/flashserve/caddy-flash-serve/internal/fusetest"
	"github.com/flashserve/caddy-flash-serve/transmit"
)

// failingFile is a FUSE file whose reads fail with EIO from goodUpTo on,
// as a disk with a bad sector does.
type failingFile struct {
	fs.Inode
	size, goodUpTo int64
}

func (f *failingFile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o644
	out.Size = uint64(f.size)
	out.Mtime = 1_700_000_000
	return 0
}

func (f *failingFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, 0, 0
}

func (f *failingFile) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n := min(int64(len(dest)), f.size-off)
	// A request that touches the bad area fails whole, as a bad sector
	// does: a short read would make the kernel fill the rest with zeros.
	if off+n > f.goodUpTo {
		return nil, syscall.EIO
	}
	for i := range n {
		dest[i] = patternByte(off + i)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func patternByte(off int64) byte { return byte(off/4096) + 'A'%32 }

type failingRoot struct {
	fs.Inode
}

func (r *failingRoot) OnAdd(ctx context.Context) {
	for name, f := range map[string]*failingFile{
		"bad.bin":  {size: 8 << 20, goodUpTo: 3 << 20},
		"good.bin": {size: 1 << 20, goodUpTo: 1 << 20},
	} {
		r.AddChild(name, r.NewPersistentInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG}), false)
	}
}

var _ = (fs.NodeOnAdder)((*failingRoot)(nil))

// TestDiskReadError serves from a FUSE filesystem whose file fails with
// EIO after 3 MiB, as a bad sector would: the response starts (200 and
// the full Content-Length, since the error is not known yet), then the
// connection is cut where the read fails, never padded; the bytes sent
// are right; other files are still served; and nothing is left behind.
func TestDiskReadError(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE without fusermount needs root (CI runs as root)")
	}
	// No splice: its pipes belong to the FUSE server, not to flash_serve,
	// and would blur the fd count.
	mnt, server := fusetest.Mount(t, &failingRoot{},
		fuse.MountOptions{DirectMount: true, DisableSplice: true, FsName: "flashserve-test", Name: "failing"})
	t.Cleanup(func() { server.Unmount() })

	ports := map[string]int{transmit.PolicySendfile: freePort(t), transmit.PolicyCopy: freePort(t)}
	var sites strings.Builder
	for engine, port := range ports {
		sites.WriteString(siteBlock(port, mnt, flashServe("transmit "+engine, "inotify off")))
	}
	loadSites(t, "", sites.String())
	c := &http.Client{Timeout: 10 * time.Second}
	// Warm the cache (a HEAD reads no body), so that its descriptors are
	// in the baseline.
	for _, port := range ports {
		get(t, c, fmt.Sprintf("http://127.0.0.1:%d/good.bin", port))
		if resp, err := c.Head(fmt.Sprintf("http://127.0.0.1:%d/bad.bin", port)); err == nil {
			resp.Body.Close()
		}
	}
	c.CloseIdleConnections()
	base := settledResources(t)

	for engine, port := range ports {
		t.Run(engine, func(t *testing.T) {
			conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(30 * time.Second))
			fmt.Fprint(conn, "GET /bad.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 || resp.ContentLength != 8<<20 {
				t.Fatalf("status %d, length %d", resp.StatusCode, resp.ContentLength)
			}
			body, err := io.ReadAll(resp.Body)
			if err == nil || len(body) >= 8<<20 {
				t.Fatalf("read %d bytes and %v; want the connection cut short", len(body), err)
			}
			if len(body) > 3<<20 {
				t.Fatalf("%d bytes sent, but only the first 3 MiB can be read", len(body))
			}
			for i, b := range body {
				if b != patternByte(int64(i)) {
					t.Fatalf("byte %d is %q, want %q: the server sent bytes it did not read", i, b, patternByte(int64(i)))
				}
			}
			t.Logf("%s: cut after %d bytes: %v", engine, len(body), err)
			// The server goes on: another file on the same disk is served.
			status, _, good := get(t, c, fmt.Sprintf("http://127.0.0.1:%d/good.bin", port))
			if status != 200 || len(good) != 1<<20 || !bytes.Equal(good[:4096], bytes.Repeat([]byte{patternByte(0)}, 4096)) {
				t.Fatalf("good.bin after the error: status %d, %d bytes", status, len(good))
			}
		})
	}
	c.CloseIdleConnections()
	backToBaseline(t, base, base.threads+8)
}
