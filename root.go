package flashserve

import (
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
)

// siteRoots makes a handler's site roots canonical, absolute and clean, the
// form of every cache key, confinement root and inotify watch ("./docs/x"
// would never be invalidated by an event on "docs/x"). A root without
// placeholders is resolved at provisioning; a placeholder root per
// request, for nothing when it is absolute and clean.
type siteRoots struct {
	// static is the canonical root when it has no placeholder, else "".
	static string
	// cwd is the working directory, the root when none is set and the base
	// of relative roots (Caddy never changes it).
	cwd string
	// last is the last relative root resolved per request and its
	// canonical form.
	last atomic.Pointer[[2]string]
}

func newSiteRoots(root string) (*siteRoots, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	sr := &siteRoots{cwd: cwd}
	if !strings.Contains(root, "{") {
		sr.static = sr.canonical(root)
	}
	return sr, nil
}

// canonical returns root absolute and clean: the working directory for
// "", and a `..` element removed as text, as file_server's own
// filepath.Join of the root and the request path removes it.
func (sr *siteRoots) canonical(root string) string {
	if root == "" || root == "." {
		return sr.cwd
	}
	if filepath.IsAbs(root) {
		if runtime.GOOS != "windows" && cleanAbs(root) {
			return root // the usual root, checked without Clean's scan
		}
		return filepath.Clean(root) // no allocation when already clean
	}
	if p := sr.last.Load(); p != nil && p[0] == root {
		return p[1]
	}
	var abs string
	if runtime.GOOS == "windows" {
		// A root like `\srv` or `C:srv` is relative to more than the
		// working directory there: let the OS say.
		var err error
		if abs, err = caddy.FastAbs(root); err != nil {
			abs = filepath.Join(sr.cwd, root)
		}
	} else {
		abs = filepath.Join(sr.cwd, root)
	}
	sr.last.Store(&[2]string{root, abs})
	return abs
}

// siteRoot returns the canonical root of a request. A placeholder that
// is empty stands for ".", as in file_server: `{http.vars.unset}/` is the
// working directory, not "/".
func (fsrv *FlashServe) siteRoot(r *http.Request, repl *caddy.Replacer) string {
	if fsrv.roots.static != "" {
		return fsrv.roots.static
	}
	return fsrv.roots.canonical(fsrv.rootValue.expand(r, repl, "."))
}
