package flashserve

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	weakrand "math/rand/v2"
	"net/http"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/encode"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/flashserve/caddy-flash-serve/internal/fileio"
	"github.com/flashserve/caddy-flash-serve/statacc"
)

// resolved is the outcome of a successful lookup: the file a request maps
// to and the representation of it that will be sent.
type resolved struct {
	// filename is the file the request maps to (after index resolution);
	// its extension gives the Content-Type.
	filename string
	// entry describes filename. Its modification time gives Last-Modified
	// even when a sidecar is sent, because sidecars are transparent.
	entry *statacc.Entry
	// body describes the bytes sent: entry itself or a precompressed sidecar.
	body *statacc.Entry
	// encoding is the sidecar's Content-Encoding, "" for the file itself.
	encoding string
	// etag is the validator of the body: a header directive's, an ETag
	// file's, or the computed one of the file or sidecar.
	etag string
	// root is the site root the lookup was confined to.
	root string
	// plan is the response's plan, allocated once the lookup found a file
	// to send (a miss needs none); the header values set from here on come
	// from it.
	plan *plan
}

// release gives back the cache references the lookup took.
func (res *resolved) release() {
	if res.body != nil && res.body != res.entry {
		res.body.Release()
	}
	if res.entry != nil {
		res.entry.Release()
	}
}

// Lookup outcomes that are not a file to send.
var (
	errNotFound = errors.New("file not found")
	errBrowse   = errors.New("directory listing")
)

// redirectTo is the lookup outcome of a non-canonical URI.
type redirectTo string

func (r redirectTo) Error() string { return "redirect to " + string(r) }

// lookup maps a request to the file and representation to send. It follows
// file_server step by step, because every difference in order is a
// difference in answers: index files, then hiding, then the canonical
// redirect, then precompressed sidecars, then the file itself.
func (fsrv *FlashServe) lookup(res *resolved, w http.ResponseWriter, r *http.Request, repl *caddy.Replacer) error {
	hide := fsrv.hidePaths(repl)
	root := fsrv.siteRoot(r, repl)
	if fsrv.prewarm != nil {
		fsrv.prewarm.seeRoot(root)
	}
	if fsrv.roots.static == "" && fsrv.site != nil {
		fsrv.site.sawRoot(root)
	}
	filename := joinRequestPath(root, r.URL.Path)
	if c := fsrv.logger.Check(zapcore.DebugLevel, "sanitized path join"); c != nil {
		c.Write(zap.String("site_root", root), zap.String("request_path", r.URL.Path), zap.String("result", filename))
	}

	ctx := r.Context()
	entry, err := fsrv.cache.GetCounted(ctx, fsrv.lookupCounts(), root, fsrv.symlinks, filename)
	if err != nil {
		return statError(err)
	}
	// Until res owns it, entry must be released on every way out.
	owned := false
	defer func() {
		if !owned {
			entry.Release()
		}
	}()

	implicitIndex := false
	if entry.IsDir() {
		for _, name := range fsrv.IndexNames {
			indexPath := caddyhttp.SanitizedPathJoin(filename, repl.ReplaceAll(name, ""))
			if fileHidden(indexPath, hide) {
				continue
			}
			ie, err := fsrv.cache.GetCounted(ctx, fsrv.lookupCounts(), root, fsrv.symlinks, indexPath)
			if statacc.IsRefused(err) || transientLookupError(err) {
				// An index the symlinks mode refuses is a 403, as nginx's
				// disable_symlinks answers: skipping it would hand the
				// directory to the next index, the listing or pass_thru,
				// which is not what the site's author linked there. An
				// index that could not be looked up now (the fd table full,
				// the lookup queue full, the client gone) is a 503 with
				// Retry-After (or a 499): skipped, as file_server skips
				// any index it cannot stat, a page that exists would be
				// answered 404 (which caches keep) or with a listing.
				return statError(err)
			}
			if err != nil {
				continue
			}
			entry.Release()
			entry, filename, implicitIndex = ie, indexPath, true
			break
		}
	}
	if entry.IsDir() {
		if fsrv.Browse != nil && !fileHidden(filename, hide) {
			return errBrowse
		}
		return errNotFound
	}
	if fileHidden(filename, hide) {
		return errNotFound
	}

	if to, ok := canonicalRedirect(r, implicitIndex, fsrv.CanonicalURIs); ok {
		return to
	}

	// A FIFO, socket or device is not a file to serve: opening a FIFO
	// would block a thread until a writer came. nginx answers 404 too.
	if !entry.IsRegular() {
		return errNotFound
	}

	h := w.Header()
	// A header directive may have set the ETag; file_server lets it win.
	etag := headerValue(h, "Etag")
	// The response's one allocation.
	p := new(plan)
	// Vary is sent even without a sidecar, so caches key on the encoding
	// whatever the response (caddy#5849).
	p.addValue(h, "Vary", "Accept-Encoding")

	*res = resolved{filename: filename, entry: entry, root: root, plan: p}
	owned = true
	if len(fsrv.precompressors) > 0 {
		if err := fsrv.selectSidecar(r, res, hide, &etag); err != nil {
			res.release()
			*res = resolved{}
			return err
		}
	}
	if res.body == nil {
		res.body = entry
		if etag == "" && fsrv.EtagFileExtensions != nil {
			if etag, err = fsrv.etagFromFile(ctx, root, filename); err != nil {
				res.release()
				*res = resolved{}
				return err
			}
		}
		if etag == "" {
			etag = entry.ETag()
		}
	}
	res.etag = etag
	if res.encoding != "" {
		h["Content-Encoding"] = p.value(res.encoding)
	}
	return nil
}

// joinRequestPath maps a request path under root to a filesystem path,
// exactly as file_server does (caddyhttp.SanitizedPathJoin, then without
// a trailing slash), with a fast path that allocates once for the common
// request path that is already clean.
func joinRequestPath(root, reqPath string) string {
	if runtime.GOOS != "windows" && len(reqPath) > 1 && len(root) > 1 && cleanAbs(reqPath) && cleanAbs(root) {
		// A clean absolute path has no "." or ".." element and no
		// doubled slash, so joining is concatenating.
		return root + reqPath
	}
	// SanitizedPathJoin keeps a trailing slash that stat would refuse.
	return strings.TrimSuffix(caddyhttp.SanitizedPathJoin(root, reqPath), "/")
}

// cleanAbs reports whether p is a slash-separated absolute path that
// path.Clean returns unchanged: every element between slashes is neither
// empty, "." nor "..", and only "/" itself ends with a slash. It is
// path.Clean(p) == p for such paths without Clean's copy, which a request
// pays for twice or three times (the root, the request path, the hide
// check).
func cleanAbs(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	if len(p) == 1 {
		return true
	}
	// strings.Index is vectorised (by windows: indexPair); a byte loop
	// over the path cost more than the rest of the lookup.
	if p[len(p)-1] == '/' || indexPair(p, "//") >= 0 {
		return false
	}
	// What is left to refuse is a "." or ".." element: a "/." that the
	// end, a slash or "./" or a final "." follows.
	for rest := p; ; {
		i := indexPair(rest, "/.")
		if i < 0 {
			return true
		}
		rest = rest[i+2:]
		if rest == "" || rest[0] == '/' || rest[0] == '.' && (len(rest) == 1 || rest[1] == '/') {
			return false
		}
	}
}

// indexPair is strings.Index(s, pair) for a pair of bytes, looked for in
// windows of 64 bytes, where strings.Index compares them all at once:
// over a longer string it looks for the pair's first byte one at a time,
// and a path has a slash every few bytes, so that the two searches of a
// 3.4 KB path 380 levels deep cost 6 µs, more than the rest of its 404
// (1 µs by windows; a path of 64 bytes or less is one window, as before).
func indexPair(s, pair string) int {
	const window = 64
	if len(s) <= window {
		return strings.Index(s, pair)
	}
	// The windows overlap by a byte, for a pair across their boundary.
	for off := 0; off < len(s)-1; off += window - 1 {
		if i := strings.Index(s[off:min(off+window, len(s))], pair); i >= 0 {
			return off + i
		}
	}
	return -1
}

// selectSidecar picks the first precompressed sidecar that the client
// accepts and that exists, and opens it.
func (fsrv *FlashServe) selectSidecar(r *http.Request, res *resolved, hide hideList, etag *string) error {
	for _, ae := range encode.AcceptedEncodings(r, fsrv.PrecompressedOrder) {
		pc, ok := fsrv.precompressors[ae]
		if !ok {
			continue
		}
		sidecar := res.filename + pc.Suffix()
		if fileHidden(sidecar, hide) {
			continue
		}
		se, err := fsrv.cache.GetCounted(r.Context(), fsrv.lookupCounts(), res.root, fsrv.symlinks, sidecar)
		if err != nil {
			if !absent(err) {
				if transientLookupError(err) {
					// Not known to be missing: sending the file instead
					// would answer with other bytes than a moment later.
					return statError(err)
				}
				// Unreadable or looping: skipped, as file_server skips a
				// sidecar it cannot stat; the file itself is sent.
				fsrv.sidecarFailed(sidecar, err)
			}
			continue
		}
		if !se.IsRegular() {
			se.Release()
			continue
		}
		res.body, res.encoding = se, ae
		if *etag == "" && fsrv.EtagFileExtensions != nil {
			if *etag, err = fsrv.etagFromFile(r.Context(), res.root, sidecar); err != nil {
				return err
			}
		}
		if *etag == "" {
			// The sidecar's own validator: its bytes differ from the file's
			// (https://caddy.community/t/16793).
			*etag = se.ETag()
		}
		return nil
	}
	return nil
}

// sidecarFailed logs a precompressed sidecar that exists but cannot be
// opened (a permission, a loop), which is then skipped, as file_server
// does. Every request for the file meets it again, so it is a WARN the
// first time for each path and DEBUG after.
func (fsrv *FlashServe) sidecarFailed(sidecar string, err error) {
	level := zapcore.DebugLevel
	if fsrv.sidecarWarned.first(sidecar) {
		level = zapcore.WarnLevel
	}
	if c := fsrv.logger.Check(level, "opening precompressed file failed"); c != nil {
		c.Write(zap.String("filename", sidecar), zap.Error(err))
	}
}

// pathSet remembers paths already reported, up to a bound: when full it
// starts again, so that a path may be reported once more but the set never
// grows with the tree.
type pathSet struct {
	m sync.Map
	n atomic.Int64
}

// pathSetMax bounds a pathSet.
const pathSetMax = 4096

// first reports whether p was not in the set, and adds it.
func (s *pathSet) first(p string) bool {
	if _, seen := s.m.Load(p); seen {
		return false
	}
	if _, seen := s.m.LoadOrStore(p, struct{}{}); seen {
		return false
	}
	if s.n.Add(1) > pathSetMax {
		s.m.Clear()
		s.n.Store(0)
	}
	return true
}

// lookupFailed answers a request whose lookup found nothing to send.
func (fsrv *FlashServe) lookupFailed(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, err error) error {
	// A type assertion, not errors.As, which would allocate on every miss:
	// lookup returns a redirectTo itself.
	if to, ok := err.(redirectTo); ok {
		return redirect(w, r, string(to))
	}
	switch {
	case errors.Is(err, errNotFound):
		if fsrv.PassThru {
			return next.ServeHTTP(w, r)
		}
		// Returned as an error, as file_server does: Caddy's server then
		// runs the error routes that apply (its own, or a subroute's), and
		// writes the status below every handler's wrapper, so deferred
		// header rules treat it as file_server's. Written here only where
		// nothing could tell (quietNotFound), as `respond 404` does.
		if fsrv.quietNotFound(w, r) {
			counters.quiet404.Add(1)
			w.WriteHeader(http.StatusNotFound)
			return nil
		}
		return notFoundError()
	case errors.Is(err, errBrowse):
		if fsrv.listing != nil {
			repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
			return fsrv.fileServerFailed(w, fsrv.listing.serve(w, r, next, repl, fsrv.siteRoot(r, repl)))
		}
		return fsrv.fileServerFailed(w, fsrv.fallback.ServeHTTP(w, r, next))
	}
	var he caddyhttp.HandlerError
	if errors.As(err, &he) && he.StatusCode == http.StatusServiceUnavailable {
		unavailable(w, err)
	}
	return err
}

// unavailable adds to a 503 its Retry-After: probably out of file
// descriptors, so the clients' retries are spread over a few seconds, that
// they do not all come back at once.
func unavailable(w http.ResponseWriter, err error) {
	w.Header().Set("Retry-After", strconv.Itoa(2+weakrand.IntN(4)))
	if !errors.Is(err, statacc.ErrQueueFull) {
		counters.fdExhausted.Add(1) // the cache counts its full queue itself
	}
}

// fileServerFailed gives the error of the embedded file_server (listings,
// file systems other than the OS's) the answer a lookup gives: a full fd
// table is a 503 with Retry-After, where file_server's stat of the
// directory (and a listing's read of it) answers 500. file_server's own
// 503s (its open of the directory) keep their Retry-After.
func (fsrv *FlashServe) fileServerFailed(w http.ResponseWriter, err error) error {
	if err == nil {
		return nil
	}
	var he caddyhttp.HandlerError
	if !errors.As(err, &he) || !fileio.IsFDExhaustion(he.Err) {
		return err
	}
	if he.StatusCode == http.StatusInternalServerError {
		he.StatusCode = http.StatusServiceUnavailable
	}
	if he.StatusCode == http.StatusServiceUnavailable {
		if w.Header().Get("Retry-After") != "" {
			counters.fdExhausted.Add(1)
		} else {
			unavailable(w, he.Err)
		}
	}
	return he
}

// notFoundError is caddyhttp.Error(http.StatusNotFound, nil) made cheap
// enough for a storm of 404s: its trace, which costs a runtime.Caller and
// a Sprintf, is the same for every 404 and is computed once.
func notFoundError() error {
	return caddyhttp.HandlerError{StatusCode: http.StatusNotFound, ID: errorID(), Trace: notFoundTrace}
}

// notFoundTrace is the trace of every 404 this handler answers, the one
// Caddy's error log shows: "caddy-flash-serve.fileNotFound (lookup.go:<line>)".
var notFoundTrace = fileNotFound().Trace

// fileNotFound is the 404 for a request path with no file behind it,
// built by caddyhttp.Error once, for its trace: a trace names the function
// that called caddyhttp.Error, so this function's name is what the error
// log says every flash_serve 404 came from (file_server's says
// "fileserver.(*FileServer).notFound").
func fileNotFound() caddyhttp.HandlerError { return caddyhttp.Error(http.StatusNotFound, nil) }

// errorID returns a random error id of the shape caddyhttp.Error gives
// (9 characters of its same-case alphabet), in one allocation.
func errorID() string {
	const alphabet = "abcdefghijkmnpqrstuvwxyz23456789"
	var b [9]byte
	u := weakrand.Uint64()
	for i := range b {
		b[i] = alphabet[u&31]
		u >>= 5
	}
	return string(b[:])
}

// canonicalRedirect reports where to redirect a request whose path does
// not follow the convention: a trailing slash for directories, none for
// files (caddy#2741). It never redirects when a rewrite changed the last
// path element, which could loop (caddy#4205).
func canonicalRedirect(r *http.Request, implicitIndex bool, canonical *bool) (redirectTo, bool) {
	if canonical != nil && !*canonical {
		return "", false
	}
	orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request)
	if !ok || orig.URL == nil || path.Base(orig.URL.Path) != path.Base(r.URL.Path) {
		return "", false
	}
	p := orig.URL.Path
	switch hasSlash := strings.HasSuffix(p, "/"); {
	case implicitIndex && !hasSlash:
		return redirectTo(p + "/"), true
	case !implicitIndex && hasSlash:
		return redirectTo(p[:len(p)-1]), true
	}
	return "", false
}

// redirect answers 308 to a same-origin path, keeping the query.
func redirect(w http.ResponseWriter, r *http.Request, toPath string) error {
	// A path that starts with // would be read as another host.
	for strings.HasPrefix(toPath, "//") {
		toPath = toPath[1:]
	}
	if r.URL.RawQuery != "" {
		toPath += "?" + r.URL.RawQuery
	}
	http.Redirect(w, r, toPath, http.StatusPermanentRedirect)
	return nil
}

// absent reports whether a sidecar or an ETag file is as good as missing:
// it does not exist, or the symlinks option refuses it. A refused sidecar
// or ETag file is ignored rather than answered 403, because it only
// replaces bytes or a validator of a file that is served anyway: the file
// itself is what the request names, and it passed the confinement.
func absent(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || statacc.IsRefused(err)
}

// transientLookupError reports whether a lookup failed for the server's
// state rather than the file's: the fd table is full, the lookup queue is
// full, or the client has gone. Such a path is not known to be missing, so
// a lookup that meets it ends (statError: 503 with Retry-After, or 499)
// rather than go on as if it were: to the next index file, to the file
// without its sidecar, to the computed ETag.
func transientLookupError(err error) bool {
	return err != nil && (fileio.IsFDExhaustion(err) || errors.Is(err, statacc.ErrQueueFull) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}

// statError maps an error from stat(2) to the answer file_server gives.
func statError(err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		// ENOTDIR: a file used as a directory, as in /index.html/foo.
		return errNotFound
	case errors.Is(err, fs.ErrPermission):
		return caddyhttp.Error(http.StatusForbidden, err)
	case fileio.IsFDExhaustion(err), errors.Is(err, statacc.ErrQueueFull):
		return serviceUnavailable(err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client hung up while its lookup waited; nobody reads the
		// answer, and 499 keeps it out of the error log, as in nginx.
		return caddyhttp.Error(statusClientClosedRequest, err)
	case errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.EINVAL):
		return caddyhttp.Error(http.StatusBadRequest, err)
	}
	return caddyhttp.Error(http.StatusInternalServerError, err)
}

const statusClientClosedRequest = 499

// openError maps an error from open(2) of a file that stat found.
func openError(err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return errNotFound // it vanished since the stat
	case errors.Is(err, fs.ErrPermission):
		return caddyhttp.Error(http.StatusForbidden, err)
	}
	// Most likely the fd table is full: tell the client to come back.
	return serviceUnavailable(err)
}

// serviceUnavailable is a 503; lookupFailed adds the Retry-After.
func serviceUnavailable(err error) error {
	return caddyhttp.Error(http.StatusServiceUnavailable, err)
}

// etagFromFile reads the ETag from the first sidecar file (name+suffix)
// that exists. Newlines are dropped; the value is sent as the file holds it.
func (fsrv *FlashServe) etagFromFile(ctx context.Context, root, name string) (string, error) {
	for _, suffix := range fsrv.EtagFileExtensions {
		e, err := fsrv.cache.GetCounted(ctx, fsrv.lookupCounts(), root, fsrv.symlinks, name+suffix)
		if absent(err) {
			continue
		}
		if transientLookupError(err) {
			// A 503 with Retry-After, not file_server's 500: the ETag
			// file may well be readable a moment later.
			return "", statError(err)
		}
		var b []byte
		if err == nil {
			b, err = e.ReadAll()
			e.Release()
		}
		if err != nil {
			return "", caddyhttp.Error(http.StatusInternalServerError,
				fmt.Errorf("cannot read etag from file %s: %w", name+suffix, err))
		}
		// ReadAll gave a copy of the caller's own: edit it in place.
		return string(slices.DeleteFunc(b, func(c byte) bool { return c == '\n' })), nil
	}
	return "", nil
}

// hidePaths returns the hide list for this request: the provisioned one,
// or, if it has placeholders, one built anew.
func (fsrv *FlashServe) hidePaths(repl *caddy.Replacer) hideList {
	if !fsrv.hideDynamic {
		return fsrv.hideList
	}
	hide := make([]string, len(fsrv.hide))
	for i, h := range fsrv.hide {
		h = repl.ReplaceAll(h, "")
		if strings.Contains(h, separator) {
			if abs, err := caddy.FastAbs(h); err == nil {
				h = abs
			}
		}
		hide[i] = h
	}
	return newHideList(hide)
}

// hideList is a hide list with each entry classified once.
type hideList []hidePattern

// hidePattern is one entry of a hide list.
type hidePattern struct {
	pattern string
	// literal is set when the pattern has no glob syntax: it then matches
	// only itself, and a comparison replaces filepath.Match, which scans
	// the whole pattern on every call (the Caddyfile that every Caddyfile
	// site hides is such an entry, checked on every request).
	literal bool
	// elem is set when the pattern has no separator: it then matches any
	// path element.
	elem bool
}

// globMeta returns the bytes that make a filepath.Match pattern more than
// a literal: a backslash escapes, except on Windows, where it is the
// separator.
func globMeta() string {
	if runtime.GOOS == "windows" {
		return "*?["
	}
	return `*?[\`
}

func newHideList(hide []string) hideList {
	if len(hide) == 0 {
		return nil
	}
	hl := make(hideList, len(hide))
	for i, h := range hide {
		hl[i] = hidePattern{pattern: h, literal: !strings.ContainsAny(h, globMeta()), elem: !strings.Contains(h, separator)}
	}
	return hl
}

// match is filepath.Match(p.pattern, name), an error being no match.
func (p hidePattern) match(name string) bool {
	if p.literal {
		return p.pattern == name
	}
	ok, _ := filepath.Match(p.pattern, name)
	return ok
}

// fileHidden reports whether filename is hidden by the hide list, with
// file_server's rules: an entry without a separator matches any path
// element, an entry with one matches itself and everything below it, and
// every entry is also tried as a glob against the whole path.
func fileHidden(filename string, hide hideList) bool {
	if len(hide) == 0 {
		return false
	}
	if runtime.GOOS == "windows" || !cleanAbs(filename) {
		if abs, err := caddy.FastAbs(filename); err == nil {
			filename = abs
		}
	}
	for _, h := range hide {
		if h.elem {
			for rest := filename; ; {
				elem, after, more := strings.Cut(rest, separator)
				if h.match(elem) {
					return true
				}
				if !more {
					break
				}
				rest = after
			}
		} else if after, ok := strings.CutPrefix(filename, h.pattern); ok && strings.HasPrefix(after, separator) {
			return true
		}
		if h.match(filename) {
			return true
		}
	}
	return false
}

// rejectWindowsPath refuses, on Windows, request paths that could reach a
// file under another name and so bypass hide: alternate data streams and
// 8.3 short names.
func rejectWindowsPath(p string) error {
	if runtime.GOOS != "windows" {
		return nil
	}
	if strings.Contains(p, ":") {
		return caddyhttp.Error(http.StatusBadRequest, errors.New("illegal ADS path"))
	}
	if caddyhttp.HasWindowsShortName(p) {
		return caddyhttp.Error(http.StatusBadRequest, errors.New("illegal short name"))
	}
	return nil
}

// lookupCounts are the counts of this handler's lookups, nil for a
// handler that is not provisioned.
func (fsrv *FlashServe) lookupCounts() *statacc.LookupCounts {
	if fsrv.site == nil {
		return nil
	}
	return &fsrv.site.lookups
}
