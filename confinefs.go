package flashserve

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/fileserver"

	"github.com/flashserve/caddy-flash-serve/internal/fileio"
	"github.com/flashserve/caddy-flash-serve/statacc"
)

// Directory listings are rendered by an embedded file_server that reads
// the disk through confinedFS. Under `symlinks deny|beneath` a listing can
// then neither follow nor reveal a link the mode refuses: its stats and
// opens go through the same confinement as the cache's lookups (openat2
// with RESOLVE_BENEATH, and RESOLVE_NO_SYMLINKS for deny, on Linux; the
// lstat walk elsewhere), and a listed link the mode would not serve is left
// out. Under follow it lists what file_server lists, but confinedFS has a
// Stat, which Caddy's own OS filesystem does not show file_server: there a
// stat is an open, and with the fd table full file_server answered 400
// (its stat's error taken for a bad path) where a stat needs no descriptor
// and the open of the directory answers 503 with Retry-After.
//
// file_server finds its filesystem by name in the config's filesystem map,
// and an fs.FS is given names only, not the request's root. So each listing
// registers a confinedFS that knows its root under a name of its own, for
// the time of that one request, and tells the embedded file_server the
// name and the root through two replacer variables. (A handler provisioned
// outside a loaded config has no shared map: its listings answer 404,
// file_server's "filesystem not found", never an unconfined listing; under
// follow such a handler lists through the plain fallback.)
const (
	browseFSVar   = "flash_serve.browse_fs"
	browseRootVar = "flash_serve.browse_root"
)

// browseSeq numbers the per-listing filesystem names.
var browseSeq atomic.Uint64

// confinedBrowse is the embedded file_server of listings and the
// filesystem map it reads.
type confinedBrowse struct {
	fileServer *fileserver.FileServer
	fsmap      caddy.FileSystems
	mode       statacc.Symlinks
}

// provisionConfinedBrowse builds the listing file_server.
func (fsrv *FlashServe) provisionConfinedBrowse(ctx caddy.Context) error {
	if fsrv.Browse == nil {
		return nil
	}
	if fsrv.symlinks == statacc.SymlinksFollow && ctx.FileSystems() != ctx.FileSystems() {
		// Not in a loaded config (each call makes a new map): nothing
		// to confine, and file_server lists through the fallback.
		return nil
	}
	// No precompressed or ETag files: a listing uses neither, and a file
	// that appeared since the lookup is the lookup's to serve.
	fb := fsrv.embeddedFileServer("{"+browseFSVar+"}", "{"+browseRootVar+"}")
	if err := fb.Provision(ctx); err != nil {
		return fmt.Errorf("provisioning the embedded file_server for listings: %w", err)
	}
	fsrv.listing = &confinedBrowse{fileServer: fb, fsmap: ctx.FileSystems(), mode: fsrv.symlinks}
	return nil
}

// serve lists the directory of a request whose lookup found no index file,
// below root, as the mode says.
func (cb *confinedBrowse) serve(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, repl *caddy.Replacer, root string) error {
	name := "flash_serve listing " + strconv.FormatUint(browseSeq.Add(1), 10)
	cb.fsmap.Register(name, &confinedFS{root: root, mode: cb.mode})
	defer cb.fsmap.Unregister(name)
	repl.Set(browseFSVar, name)
	repl.Set(browseRootVar, root)
	defer repl.Delete(browseFSVar)
	defer repl.Delete(browseRootVar)
	return cb.fileServer.ServeHTTP(w, r, next)
}

// confinedFS is the OS filesystem below one root, resolved as a symlinks
// mode says. Names are the absolute paths file_server joins from the root
// and the request path; a name outside the root is refused like a link
// that leaves it.
type confinedFS struct {
	root string
	mode statacc.Symlinks
}

func (c *confinedFS) Open(name string) (fs.File, error) {
	f, err := statacc.OpenConfined(c.root, name, c.mode)
	if err != nil {
		return nil, tableFull(err)
	}
	if info, err := f.Stat(); err == nil && info.IsDir() {
		return &confinedDir{File: f, fsys: c}, nil
	}
	return f, nil
}

func (c *confinedFS) Stat(name string) (fs.FileInfo, error) {
	info, err := statacc.StatConfined(c.root, name, c.mode)
	return info, tableFull(err)
}

// tableFull returns a full fd table's error as a tableFullError, and any
// other error as it is.
func tableFull(err error) error {
	var errno syscall.Errno
	if fileio.IsFDExhaustion(err) && errors.As(err, &errno) {
		return &tableFullError{err: err, errno: errno}
	}
	return err
}

// tableFullError is confinedFS's error for a full fd table. It is no
// *fs.PathError (Caddy's filesystem map hides Stat from file_server, whose
// every stat is then an open): file_server takes a PathError that is not
// "not found" or "permission" for a bad path and answers 400
// (mapDirOpenError). This one it answers 500 (its stat of the directory)
// or 503 (its open of it), which fileServerFailed makes a 503 with
// Retry-After, as a lookup answers.
type tableFullError struct {
	err   error
	errno syscall.Errno
}

func (e *tableFullError) Error() string { return e.err.Error() }
func (e *tableFullError) Unwrap() error { return e.errno }

// listed reports whether a directory entry may appear in a listing: every
// entry but a link, and a link only if the mode would serve what it leads
// to (never under deny; under beneath, if it resolves below the root). A
// dangling or looping link is left out too: it would not be served, and
// its target text, which reveal_symlinks shows, may name a place outside.
// A link that cannot be resolved now (the fd table is full) fails the
// listing, which is answered 503, rather than be left out of a listing
// that would then be wrong.
func (c *confinedFS) listed(dir string, e fs.DirEntry) (bool, error) {
	if e.Type()&fs.ModeSymlink == 0 || c.mode == statacc.SymlinksFollow {
		return true, nil // file_server lists every link, dangling or not
	}
	if c.mode == statacc.SymlinksDeny {
		return false, nil
	}
	_, err := c.Stat(filepath.Join(dir, e.Name()))
	if fileio.IsFDExhaustion(err) {
		return false, tableFull(err)
	}
	return err == nil, nil
}

// confinedDir is an open directory of a confinedFS whose ReadDir leaves out
// the entries the mode refuses.
type confinedDir struct {
	*os.File
	fsys *confinedFS
}

func (d *confinedDir) ReadDir(n int) ([]fs.DirEntry, error) {
	for {
		ents, err := d.File.ReadDir(n)
		kept := ents[:0]
		for _, e := range ents {
			ok, lerr := d.fsys.listed(d.Name(), e)
			if lerr != nil {
				return nil, lerr
			}
			if ok {
				kept = append(kept, e)
			}
		}
		// With n > 0, an empty answer must come with an error (io.EOF at
		// the end): read on past a batch that was all left out.
		if len(kept) > 0 || err != nil || n <= 0 {
			return kept, err
		}
	}
}

var (
	_ fs.StatFS      = (*confinedFS)(nil)
	_ fs.ReadDirFile = (*confinedDir)(nil)
)
