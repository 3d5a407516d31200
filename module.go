// Package flashserve is a Caddy HTTP handler that serves static files as
// file_server does, with its own fast path from the disk to the socket.
package flashserve

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/encode"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/fileserver"
	"go.uber.org/zap"

	"github.com/flashserve/caddy-flash-serve/internal/hotset"
	"github.com/flashserve/caddy-flash-serve/statacc"
	"github.com/flashserve/caddy-flash-serve/transmit"
)

func init() {
	caddy.RegisterModule(FlashServe{})
}

// FlashServe serves static files with the same answers as Caddy's
// file_server: index files, hidden files, canonical redirects, pass-thru,
// status overrides, precompressed sidecars, ETag, Last-Modified, Range and
// the conditional headers. It differs from file_server only where the
// README lists a deliberate difference.
//
// A request goes through three steps that can be replaced one at a time:
// lookup maps the request path to a file, decide sets the status, the
// headers and the ranges, and transmit moves the body bytes.
//
// Directory listings (browse) and filesystems other than the OS's (fs)
// are delegated to an embedded file_server, so they look exactly like
// Caddy's own.
type FlashServe struct {
	// The name of the file system to serve from, as registered in the
	// global `filesystem` option. Any file system other than the default OS
	// one is served by the embedded file_server, without the fast path.
	// Default: `{http.vars.fs}`, which the `fs` directive sets.
	FileSystem string `json:"fs,omitempty"`

	// The path to the root of the site. A site root is not a sandbox unless
	// `symlinks` makes it one: by default links inside it are followed,
	// wherever they point.
	// Default: `{http.vars.root}` if set, or the current working directory.
	Root string `json:"root,omitempty"`

	// Files or folders to hide, as if they did not exist. These are
	// filesystem paths, not request paths, and accept globs and
	// placeholders. An entry without a path separator hides every file or
	// folder of that name, wherever it is. The Caddyfile itself and a
	// relative data directory are always hidden.
	// Default: none.
	Hide []string `json:"hide,omitempty"`

	// The names of the files to try, in order, when a directory is requested.
	// Default: `index.html`, `index.txt`.
	IndexNames []string `json:"index_names,omitempty"`

	// Enables directory listings for directories without an index file.
	// Listings are rendered by Caddy's file_server.
	// Default: disabled.
	Browse *fileserver.Browse `json:"browse,omitempty"`

	// Redirect so that directories end in a slash and files do not. No
	// redirect is made when a rewrite changed the last path element.
	// Default: true.
	CanonicalURIs *bool `json:"canonical_uris,omitempty"`

	// Overrides the status code of every response that serves a file,
	// including 206, 304, 412 and 416. A placeholder may be used.
	// Default: none (200, 206 and so on, as the request requires).
	StatusCode caddyhttp.WeakString `json:"status_code,omitempty"`

	// When a file is not found, call the next handler instead of answering 404.
	// Default: false.
	PassThru bool `json:"pass_thru,omitempty"`

	// The precompressed sidecar formats to look for (`gzip`, `zstd`, `br`):
	// `file.txt.gz` is served for `file.txt` to a client that accepts gzip.
	// Default: none.
	PrecompressedRaw caddy.ModuleMap `json:"precompressed,omitempty" caddy:"namespace=http.precompressed"`

	// The order of preference among precompressed formats when the client
	// gives them equal weight.
	// Default: the order of the client's Accept-Encoding header.
	PrecompressedOrder []string `json:"precompressed_order,omitempty"`

	// Suffixes of sidecar files that hold a file's ETag, e.g. `.etag`. The
	// first one that exists is used instead of the computed ETag.
	// Default: none.
	EtagFileExtensions []string `json:"etag_file_extensions,omitempty"`

	// The number of goroutines that do the blocking stat and open calls of
	// cache misses, and so the most OS threads that lookups can hold in the
	// filesystem at once, however many cold requests arrive.
	// Default: 32, or 4 per CPU if that is more.
	StatWorkers int `json:"stat_workers,omitempty"`

	// How long a cached lookup may be trusted without a new stat, as a
	// safety net where inotify sees nothing (NFS, FUSE, a file that is a
	// symlink to a file elsewhere changed there). Entries in directories
	// that inotify cannot watch are revalidated after at most one second.
	// Default: 60s.
	Revalidate caddy.Duration `json:"revalidate,omitempty"`

	// Turns inotify off: every cached lookup is then trusted for at most
	// one second (or `revalidate`, if shorter), as in a directory inotify
	// cannot watch.
	// Default: false (inotify on, where the OS has it).
	DisableInotify bool `json:"disable_inotify,omitempty"`

	// The most file descriptors the cache keeps open. The least recently
	// used are closed first.
	// Default: a quarter of RLIMIT_NOFILE, at most 262144.
	MaxOpenFiles int `json:"max_open_files,omitempty"`

	// The most "no such file" answers the cache keeps, each about 150
	// bytes of Go heap plus its path, none of which the garbage collector
	// has to scan; 0 disables negative caching. Their paths together are
	// bounded too, to 128 bytes per entry of this number (1 MiB at least),
	// so that long paths make the cache keep fewer answers rather than
	// take more memory. When it is full (of answers or of their paths'
	// bytes), a path missing for the first time is answered without being
	// kept, so that a scanner's distinct paths displace nothing, and a path
	// that misses again replaces the entries least recently hit. A
	// directory that inotify watches, on a local filesystem and not
	// case-insensitive, in which eight names were found missing is listed
	// (up to 16,384 names; 2^18 names, about 4 MiB, in all), and its other
	// missing names, and every path below them, are answered from the
	// listing with no system call and nothing kept per path; the listing
	// is kept up to date by inotify and read again after `revalidate`.
	// 0 turns listings off too. An answer takes about 100 B of heap with
	// a 20-byte path below the site's root (the part of a path it keeps).
	// At most 1073741824.
	// Default: 65536 (about 12 MiB of heap with 100-byte paths; 8 MiB of
	// paths at most, about 22 MiB of heap in all at worst).
	NegativeCache *int `json:"negative_cache,omitempty"`

	// The most directories the cache watches with inotify: each cached
	// entry's directory, every ancestor up to `/` and every directory a
	// symlink on the way is looked up through. Past it the least recently
	// used directory is forgotten with its entries and its watch removed; a
	// directory left without a watch is revalidated after at most a second.
	// Default: a quarter of fs.inotify.max_user_watches, at most 65536.
	MaxWatches int `json:"max_watches,omitempty"`

	// The most cached lookups without a descriptor (directories and other
	// files that are not regular); past it they are answered but not kept.
	// Default: 10000.
	MaxDirEntries int `json:"max_dir_entries,omitempty"`

	// The most cached entries of regular files, each a few hundred bytes of
	// heap. The `max_open_files` most recently used keep a descriptor open;
	// the others keep their headers and validators, and a hit on one opens
	// the file again in the request (one openat2 and one fstat, checked
	// against the inode, size and mtime it had) rather than looking it up.
	// Past it the least recently used are forgotten.
	// Default: 131072, or max_open_files if more.
	MaxEntries int `json:"max_entries,omitempty"`

	// Small files kept in memory, validated by inotify and revalidate like
	// every cached lookup, and written with the headers in one write.
	// Default: a budget of 64 MiB for files of at most 16 KiB.
	MemoryCache *MemoryCache `json:"memory_cache,omitempty"`

	// How bodies leave: `auto` keeps small files in memory and writes them
	// with the headers, sends the rest with sendfile on cleartext HTTP/1.x
	// (through the flash_serve listener wrapper), and copies with pread
	// and pooled buffers elsewhere (TLS, HTTP/2, HTTP/3, encode).
	// Data that may not be in the page cache (probed with mincore) is read
	// through io_uring, so that a cold read parks its goroutine instead of
	// holding an OS thread. `sendfile` never uses io_uring; `copy` always
	// copies with pread; `io_uring` reads every body through io_uring.
	// Under each, a small file kept in memory (memory_cache) leaves from
	// memory. Where io_uring is unavailable (an old kernel,
	// kernel.io_uring_disabled, seccomp), the handler says why once and
	// does without.
	// Default: auto.
	Transmit string `json:"transmit,omitempty"`

	// The most bytes one sendfile turn sends before the connection lets
	// others have their turn, as nginx's sendfile_max_chunk. The
	// write-idle deadline is renewed within a turn, after every sendfile
	// call that made progress.
	// Default: 2 MiB.
	SendfileMaxChunk int `json:"sendfile_max_chunk,omitempty"`

	// Paths or globs under the root to load into the page cache in the
	// background after the config loads, hottest first when a hot set is
	// known (`*` is the whole root). With prewarm set, the most requested
	// files are also remembered across restarts, in Caddy's data directory.
	// Default: none.
	Prewarm []string `json:"prewarm,omitempty"`

	// The most bytes prewarm reads, counted in pages.
	// Default: 1 GiB.
	PrewarmBudget int64 `json:"prewarm_budget,omitempty"`

	// How many files prewarm reads at once.
	// Default: 2.
	PrewarmWorkers int `json:"prewarm_workers,omitempty"`

	// How often to read the hot set again, within the budget, so that a
	// backup streaming through the page cache does not evict it.
	// Default: never.
	KeepHot caddy.Duration `json:"keep_hot,omitempty"`

	// The most bytes per second the warm-ups after the hot set (the
	// prewarm paths, keep_hot) read while requests are being served;
	// with none served they read at full speed. The pages they read cost
	// the requests more than the warm-up's own CPU: the disk's
	// completions and the page cache's work land on the cores that serve.
	// The warm-up of the saved hot set after a start is not bounded: it
	// reads what the requests ask for.
	// Default: 4 MiB a second.
	PrewarmBusyRate int64 `json:"prewarm_busy_rate,omitempty"`

	// The most ranges one request may ask for. A request with more is
	// answered with the whole file, as if it had no Range header. Zero
	// disables range requests altogether.
	// Default: 16.
	MaxRanges *int `json:"max_ranges,omitempty"`

	// How symbolic links below the root are treated: `follow` them
	// wherever they point, as file_server does; `deny` any path with a
	// link (403); or follow relative links only while they stay `beneath`
	// the root (403 otherwise, and for every absolute link). On Linux 5.6 and later the kernel enforces deny and
	// beneath at the open (openat2 with RESOLVE_BENEATH), so no link
	// swapped in during a request can leave the root; elsewhere an lstat
	// walk checks the path before the open, which such a race can defeat.
	// The rule holds for index files (a refused one is 403), sidecars and
	// ETag files (a refused one is ignored) and listings (a refused link is
	// left out), as the README's Security section says.
	// Default: follow.
	Symlinks string `json:"symlinks,omitempty"`

	// The most response bodies sent at once by this handler, and how long a
	// request may queue for a place before it gets 503 with Retry-After, as
	// nginx's limit_conn for file bodies.
	// Default: no limit.
	MaxTransfers *TransferLimit `json:"max_transfers,omitempty"`

	// Paces each response body to a rate in bytes per second, after a
	// first part sent at full speed, as nginx's limit_rate and
	// limit_rate_after.
	// Default: no limit.
	LimitRate *RateLimit `json:"limit_rate,omitempty"`

	precompressors map[string]encode.Precompressed
	transfers      *transferSlots
	cache          *statacc.Cache
	shared         *sharedCache
	// site counts this handler's lookups for the status page.
	site     *site
	cacheKey string
	prewarm  *prewarmRun
	// hide holds Hide with static entries made absolute; hideDynamic is set
	// when some entry has a placeholder and must be rebuilt per request;
	// hideList is hide classified, when it is not dynamic.
	hide             []string
	hideDynamic      bool
	hideList         hideList
	maxRanges        int
	sender           transmit.Sender
	sendfileMaxChunk int
	warnOnce         *sync.Once
	cleanupOnce      *sync.Once
	// fallback is the embedded file_server for browse and non-OS filesystems;
	// listing replaces it for listings (confinefs.go).
	fallback *fileserver.FileServer
	listing  *confinedBrowse
	symlinks statacc.Symlinks
	roots    *siteRoots
	// sidecarWarned holds the sidecars whose failure was logged at WARN.
	sidecarWarned *pathSet
	// fsmap is the config's file systems, by the names of the global
	// filesystem option.
	fsmap caddy.FileSystems
	// fsValue and rootValue are FileSystem and Root, read for expansion.
	fsValue, rootValue placeholderValue
	logger             *zap.Logger
	// errorLogDebug and quiet decide whether a 404 is written here
	// (quietNotFound).
	errorLogDebug bool
	quiet         *atomic.Pointer[quietIn]
}

// MemoryCache configures the memory engine.
type MemoryCache struct {
	// The most bytes of file content kept in memory, shared by every
	// handler with the same cache settings. 0 disables the memory engine.
	Budget int64 `json:"budget"`
	// The largest file kept in memory: most HTML, CSS, scripts and icons.
	// Default: 16 KiB.
	MaxFile int64 `json:"max_file,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (FlashServe) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.flash_serve",
		New: func() caddy.Module { return new(FlashServe) },
	}
}

// Provision implements caddy.Provisioner.
func (fsrv *FlashServe) Provision(ctx caddy.Context) error {
	if err := fsrv.checkSettings(); err != nil {
		return err
	}
	fsrv.logger = ctx.Logger()
	fsrv.errorLogDebug = errorLogDebug(ctx)
	fsrv.quiet = new(atomic.Pointer[quietIn])
	if err := registerMetrics(ctx); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	if fsrv.FileSystem == "" {
		fsrv.FileSystem = "{http.vars.fs}"
	}
	if fsrv.Root == "" {
		fsrv.Root = "{http.vars.root}"
	}
	fsrv.fsValue, fsrv.rootValue = newPlaceholderValue(fsrv.FileSystem), newPlaceholderValue(fsrv.Root)
	if fsrv.IndexNames == nil {
		fsrv.IndexNames = []string{"index.html", "index.txt"}
	}
	fsrv.warnOnce = new(sync.Once)
	fsrv.fsmap = ctx.FileSystems()
	fsrv.sidecarWarned = new(pathSet)
	fsrv.cleanupOnce = new(sync.Once)
	fsrv.sendfileMaxChunk = fsrv.SendfileMaxChunk
	if fsrv.sendfileMaxChunk == 0 {
		fsrv.sendfileMaxChunk = 2 << 20
	}
	fsrv.transfers = newTransferSlots(fsrv.MaxTransfers)
	fsrv.maxRanges = defaultMaxRanges
	if fsrv.MaxRanges != nil {
		fsrv.maxRanges = *fsrv.MaxRanges
	}

	// The embedded file_server gets the same configuration; it must be
	// built before LoadModule clears PrecompressedRaw.
	fsrv.fallback = fsrv.embeddedFileServer(fsrv.FileSystem, fsrv.Root)
	fsrv.fallback.PrecompressedRaw = fsrv.PrecompressedRaw
	fsrv.fallback.PrecompressedOrder = fsrv.PrecompressedOrder
	fsrv.fallback.EtagFileExtensions = fsrv.EtagFileExtensions
	if err := fsrv.fallback.Provision(ctx); err != nil {
		return fmt.Errorf("provisioning the embedded file_server: %w", err)
	}
	// Validate refuses a bad mode; before it runs, follow is as good as any.
	fsrv.symlinks, _ = statacc.ParseSymlinks(fsrv.Symlinks)
	if err := fsrv.provisionConfinedBrowse(ctx); err != nil {
		return err
	}
	roots, err := newSiteRoots(fsrv.Root)
	if err != nil {
		return fmt.Errorf("resolving the site root: %w", err)
	}
	fsrv.roots = roots

	fsrv.hide = append([]string(nil), fsrv.Hide...)
	// A relative data directory sits under the working directory, and it
	// holds private keys: hide it, as file_server does.
	if dataDir := caddy.AppDataDir(); !filepath.IsAbs(dataDir) {
		if abs, err := caddy.FastAbs(dataDir); err == nil {
			fsrv.hide = append(fsrv.hide, abs)
		}
	}
	for i, h := range fsrv.hide {
		if strings.Contains(h, "{") {
			fsrv.hideDynamic = true
			continue
		}
		if strings.Contains(h, separator) {
			if abs, err := caddy.FastAbs(h); err == nil {
				fsrv.hide[i] = abs
			}
		}
	}
	if !fsrv.hideDynamic {
		fsrv.hideList = newHideList(fsrv.hide)
	}

	if err := fsrv.provisionCache(); err != nil {
		return err
	}
	fsrv.site = registerSite(fsrv.roots.static, fsrv.Root, fsrv.cacheKey)
	fsrv.provisionSender(fsrv.cache.Options().Workers)

	if len(fsrv.Prewarm) > 0 {
		fsrv.startPrewarm(ctx)
	}

	mods, err := ctx.LoadModule(fsrv, "PrecompressedRaw")
	if err != nil {
		return fmt.Errorf("loading precompressed encoders: %w", err)
	}
	for name, mod := range mods.(map[string]any) {
		p, ok := mod.(encode.Precompressed)
		if !ok {
			return fmt.Errorf("module %s is not a precompressor", name)
		}
		ae, suffix := p.AcceptEncoding(), p.Suffix()
		if ae == "" || suffix == "" {
			return fmt.Errorf("precompressor %s has no Accept-Encoding value or no suffix", name)
		}
		if _, dup := fsrv.precompressors[ae]; dup {
			return fmt.Errorf("precompressor already added: %s", ae)
		}
		if fsrv.precompressors == nil {
			fsrv.precompressors = make(map[string]encode.Precompressed)
		}
		fsrv.precompressors[ae] = p
	}
	return nil
}

// embeddedFileServer is a file_server configured as this handler is, on
// the given file system and root, for what flash_serve delegates to it.
func (fsrv *FlashServe) embeddedFileServer(fileSystem, root string) *fileserver.FileServer {
	return &fileserver.FileServer{
		FileSystem:    fileSystem,
		Root:          root,
		Hide:          append([]string(nil), fsrv.Hide...),
		IndexNames:    fsrv.IndexNames,
		Browse:        fsrv.Browse,
		CanonicalURIs: fsrv.CanonicalURIs,
		StatusCode:    fsrv.StatusCode,
		PassThru:      fsrv.PassThru,
	}
}

// Validate implements caddy.Validator.
func (fsrv *FlashServe) Validate() error {
	if err := fsrv.checkSettings(); err != nil {
		return err
	}
	for _, enc := range fsrv.PrecompressedOrder {
		if _, ok := fsrv.precompressors[enc]; !ok {
			return refuse("precompressed_order", "%q is not among the precompressed formats", enc)
		}
	}
	return nil
}

// checkSettings holds every range check of the settings, for JSON and the
// Caddyfile alike (whose parser reports a refusal, a *settingError naming
// the JSON field, at the subdirective's line). Provision runs it too:
// Caddy provisions before it validates, and workers must not start first.
func (fsrv *FlashServe) checkSettings() error {
	for _, c := range []struct {
		field string
		n     int
	}{
		{"stat_workers", fsrv.StatWorkers},
		{"max_open_files", fsrv.MaxOpenFiles},
		{"max_watches", fsrv.MaxWatches},
		{"max_dir_entries", fsrv.MaxDirEntries},
		{"max_entries", fsrv.MaxEntries},
	} {
		if c.n < 0 {
			return refuse(c.field, "need at least 1, got %d", c.n)
		}
	}
	if fsrv.NegativeCache != nil && (*fsrv.NegativeCache < 0 || *fsrv.NegativeCache > statacc.MaxNegativeEntries) {
		return refuse("negative_cache", "need 0 (off) to %d, got %d", statacc.MaxNegativeEntries, *fsrv.NegativeCache)
	}
	if fsrv.MaxRanges != nil && *fsrv.MaxRanges < 0 {
		return refuse("max_ranges", "need 0 (no ranges) or more, got %d", *fsrv.MaxRanges)
	}
	if fsrv.Revalidate < 0 {
		return refuse("revalidate", "need a positive duration, got %s", time.Duration(fsrv.Revalidate))
	}
	if m := fsrv.MemoryCache; m != nil {
		if m.Budget < 0 {
			return refuse("memory_cache.budget", "need 0 (off) or more, got %s", sizeText(m.Budget))
		}
		if m.MaxFile < 0 {
			return refuse("memory_cache.max_file", "need 0 or more, got %s", sizeText(m.MaxFile))
		}
	}
	switch fsrv.Transmit {
	case "", transmit.PolicyAuto, transmit.PolicySendfile, transmit.PolicyCopy, transmit.PolicyIOUring:
	default:
		return refuse("transmit", "need %s, got %q", transmitEngines, fsrv.Transmit)
	}
	if n := fsrv.SendfileMaxChunk; n != 0 && (n < 64<<10 || n > 1<<30) {
		return refuse("sendfile_max_chunk", "need 64KiB to 1GiB, got %s", sizeText(int64(n)))
	}
	if fsrv.PrewarmBudget < 0 {
		return refuse("prewarm_budget", "need more than 0, got %s", sizeText(fsrv.PrewarmBudget))
	}
	if fsrv.PrewarmBusyRate < 0 {
		return refuse("prewarm_busy_rate", "need more than 0 bytes/s, got %s", sizeText(fsrv.PrewarmBusyRate))
	}
	if n := fsrv.PrewarmWorkers; n < 0 || n > maxPrewarmWorkers {
		return refuse("prewarm_workers", "need 1 to %d, got %d", maxPrewarmWorkers, n)
	}
	if d := time.Duration(fsrv.KeepHot); d != 0 && d < time.Second {
		return refuse("keep_hot", "need an interval of 1s or more, got %s", d)
	}
	if fsrv.Prewarm == nil {
		for _, c := range []struct {
			field string
			set   bool
		}{
			{"prewarm_budget", fsrv.PrewarmBudget != 0},
			{"prewarm_workers", fsrv.PrewarmWorkers != 0},
			{"prewarm_busy_rate", fsrv.PrewarmBusyRate != 0},
			{"keep_hot", fsrv.KeepHot != 0},
		} {
			if c.set {
				return refuse(c.field, "needs prewarm, the paths to warm")
			}
		}
	}
	if _, err := statacc.ParseSymlinks(fsrv.Symlinks); err != nil {
		// statacc holds the modes; its message already names the setting.
		return refuse("symlinks", "%s", strings.TrimPrefix(err.Error(), "symlinks: "))
	}
	if err := fsrv.MaxTransfers.validate(); err != nil {
		return err
	}
	if err := fsrv.LimitRate.validate(); err != nil {
		return err
	}
	if code := fsrv.StatusCode.String(); code != "" && !strings.Contains(code, "{") {
		n, err := strconv.Atoi(code)
		if err != nil || n < 100 || n > 999 {
			return refuse("status_code", "need a status code from 100 to 999 or a placeholder, got %q", code)
		}
	}
	return nil
}

// maxPrewarmWorkers is the most files prewarm reads at once, in the
// server (prewarm_workers) and in `caddy flash-serve prewarm --workers`.
const maxPrewarmWorkers = 64

// transmitEngines are the values of transmit, as its messages list them.
const transmitEngines = "auto, sendfile, io_uring or copy"

// settingError is a value checkSettings refuses: the JSON name of the
// setting (memory_cache.max_file for a nested one) and what it allows.
type settingError struct {
	field string
	rule  string
}

func (e *settingError) Error() string { return e.field + ": " + e.rule }

// refuse returns the *settingError of field.
func refuse(field, format string, args ...any) error {
	return &settingError{field: field, rule: fmt.Sprintf(format, args...)}
}

// caddyfileSpelling is the Caddyfile's name of a JSON field where it
// differs: a nested field is its subdirective and its option's keyword.
var caddyfileSpelling = map[string]string{
	"status_code":           "status",
	"memory_cache.budget":   "memory_cache",
	"memory_cache.max_file": "memory_cache max_file",
	"max_transfers.limit":   "max_transfers",
	"max_transfers.queue":   "max_transfers queue",
	"limit_rate.rate":       "limit_rate",
	"limit_rate.after":      "limit_rate after",
}

// caddyfileName returns the Caddyfile spelling of the refused field
// ("memory_cache max_file") and the subdirective that sets it.
func (e *settingError) caddyfileName() (spelling, subdirective string) {
	spelling = e.field
	if s, ok := caddyfileSpelling[e.field]; ok {
		spelling = s
	}
	subdirective, _, _ = strings.Cut(spelling, " ")
	return spelling, subdirective
}

// sizeText writes a size as the Caddyfile would (64KiB, -1MiB) when it is
// a whole number of such units, else in bytes, so that it is exact.
func sizeText(n int64) string {
	abs := n
	if abs < 0 {
		abs = -abs
	}
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if abs >= u.size && abs%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	if n == 1 {
		return "1 byte"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// Cleanup implements caddy.CleanerUpper. It copes with a half-built
// handler (a failed Provision), and changes no field, which requests still
// in flight (an HTTP/3 stream during shutdown) may read.
func (fsrv *FlashServe) Cleanup() error {
	if fsrv.cleanupOnce == nil {
		return nil // Provision never ran
	}
	var err error
	fsrv.cleanupOnce.Do(func() {
		if fsrv.prewarm != nil {
			fsrv.prewarm.stop()
		}
		if fsrv.site != nil {
			unregisterSite(fsrv.site)
		}
		if fsrv.cache != nil {
			_, err = caches.Delete(fsrv.cacheKey)
		}
		fsrv.sender.Close()
	})
	return err
}

// caches holds the statacc caches across reloads: the new handlers are
// provisioned before the old are cleaned up, so a cache lives on while any
// handler with its settings does. Requests the old server still answers
// after its cache closed are served uncached (statacc's lookupClosed), at
// no cost to the hit path.
var caches = caddy.NewUsagePool()

// sharedCache is a cache with the saver of its hot set.
type sharedCache struct {
	*statacc.Cache
	hotOnce sync.Once
	hot     *hotset.Saver
}

// Destruct implements caddy.Destructor.
func (s *sharedCache) Destruct() error {
	if s.hot != nil {
		s.hot.Stop()
	}
	err := s.Close()
	retire(s.Cache)
	return err
}

func (fsrv *FlashServe) cacheOptions() statacc.Options {
	o := statacc.Options{
		Workers:       fsrv.StatWorkers,
		Revalidate:    time.Duration(fsrv.Revalidate),
		MaxOpenFiles:  fsrv.MaxOpenFiles,
		NoInotify:     fsrv.DisableInotify,
		MaxWatches:    fsrv.MaxWatches,
		MaxDirEntries: fsrv.MaxDirEntries,
		MaxEntries:    fsrv.MaxEntries,
	}
	// The symlinks mode is not a cache setting: every lookup names its own
	// (GetCounted), so sites with other modes share one cache.
	if fsrv.NegativeCache != nil {
		o.NegativeEntries = *fsrv.NegativeCache
		if o.NegativeEntries == 0 {
			o.NegativeEntries = -1
		}
	}
	if fsrv.MemoryCache != nil {
		o.MemoryBudget = fsrv.MemoryCache.Budget
		if o.MemoryBudget == 0 {
			o.MemoryBudget = -1
		}
		o.MemoryMaxFile = fsrv.MemoryCache.MaxFile
	}
	return o
}

// provisionCacheKeyOnly sets cacheKey, the key of the shared cache and of
// its hot-set file, without starting anything.
func (fsrv *FlashServe) provisionCacheKeyOnly() statacc.Options {
	o := fsrv.cacheOptions()
	fsrv.cacheKey = fmt.Sprintf("statacc:%+v", o)
	return o
}

func (fsrv *FlashServe) provisionCache() error {
	o := fsrv.provisionCacheKeyOnly()
	v, _, err := caches.LoadOrNew(fsrv.cacheKey, func() (caddy.Destructor, error) {
		return &sharedCache{Cache: statacc.New(o)}, nil
	})
	if err != nil {
		return err
	}
	fsrv.shared = v.(*sharedCache)
	fsrv.cache = fsrv.shared.Cache
	return nil
}

// ServeHTTP implements caddyhttp.MiddlewareHandler.
func (fsrv *FlashServe) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !fsrv.servesOSDisk(fsrv.fsValue.expand(r, repl, "")) {
		return fsrv.fileServerFailed(w, fsrv.fallback.ServeHTTP(w, r, next))
	}
	counters.begun.Add(1)
	defer counters.ended.Add(1)
	if err := rejectWindowsPath(r.URL.Path); err != nil {
		return err
	}

	// Step 1, lookup: the request path to a file and the representation of
	// it to send.
	var res resolved
	if err := fsrv.lookup(&res, w, r, repl); err != nil {
		return fsrv.lookupFailed(w, r, next, err)
	}
	defer res.release()
	p := res.plan

	// Only GET and HEAD read a file, but inside handle_errors the handler
	// serves an error page for whatever method failed (caddy#5703).
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if _, inErrorRoute := r.Context().Value(caddyhttp.ErrorCtxKey).(error); !inErrorRoute {
			// Added, as file_server does: an Allow set before stays.
			p.addValue(w.Header(), "Allow", "GET, HEAD")
			return caddyhttp.Error(http.StatusMethodNotAllowed, nil)
		}
	}

	override, err := fsrv.statusOverride(r, repl)
	if err != nil {
		return err
	}

	// A place among max_transfers is taken before decide sets the headers,
	// which a 503 must not carry; a 304 or a HEAD holds it only while its
	// headers are written.
	if fsrv.transfers != nil && r.Method == http.MethodGet {
		if err := fsrv.transfers.acquire(r.Context(), w); err != nil {
			return err
		}
		defer fsrv.transfers.release()
	}

	// Step 2, decide: status, headers and ranges.
	decide(p, w.Header(), r, &res, fsrv.maxRanges)
	if override > 0 {
		p.status = override
	}

	// Step 3, transmit: the body.
	return fsrv.writeResponse(w, r, &res, p)
}

// osDisk is Caddy's own OS filesystem, the "default" of a file system map
// in which nothing else is registered.
var osDisk = (&caddy.Context{}).FileSystems().Default()

// servesOSDisk reports whether the named file system is the OS's own,
// which the fast path reads directly. Looked up per request, as file_server
// does: the filesystem app may register "default" after this handler.
func (fsrv *FlashServe) servesOSDisk(name string) bool {
	if name != "" && name != "default" {
		return false
	}
	if fsrv.fsmap == nil {
		return true // not provisioned by Caddy (tests that build the handler)
	}
	f, ok := fsrv.fsmap.Get(name)
	return ok && f == osDisk
}

// placeholderValue is a config value that may hold placeholders; the
// usual single {http.vars.*} one (root's and fs's default) is read from the
// request's vars directly, which, unlike the replacer, allocates nothing.
type placeholderValue struct {
	raw string
	// varName is the variable of a value that is one {http.vars.NAME}
	// placeholder, else "".
	varName string
	// literal is set for a value without placeholders.
	literal bool
}

func newPlaceholderValue(value string) placeholderValue {
	pv := placeholderValue{raw: value, literal: !strings.Contains(value, "{")}
	if name, ok := strings.CutPrefix(value, "{http.vars."); ok && strings.HasSuffix(name, "}") &&
		!strings.ContainsAny(name[:len(name)-1], "{}") {
		pv.varName = name[:len(name)-1]
	}
	return pv
}

// expand replaces the placeholders of a config value.
func (pv placeholderValue) expand(r *http.Request, repl *caddy.Replacer, empty string) string {
	if pv.varName != "" {
		// One look-up: each walks the request's context chain.
		v := caddyhttp.GetVar(r.Context(), pv.varName)
		if s, ok := v.(string); ok && s != "" {
			return s
		}
		if v != nil {
			return repl.ReplaceAll(pv.raw, empty) // not a string: let the replacer format it
		}
		return empty
	}
	if pv.literal {
		if pv.raw == "" {
			return empty
		}
		return pv.raw
	}
	return repl.ReplaceAll(pv.raw, empty)
}

// statusOverride returns the status that replaces the usual one: the
// error's inside handle_errors, or the configured status_code.
func (fsrv *FlashServe) statusOverride(r *http.Request, repl *caddy.Replacer) (int, error) {
	code := 0
	if reqErr, ok := r.Context().Value(caddyhttp.ErrorCtxKey).(error); ok {
		code = http.StatusInternalServerError
		if he, ok := reqErr.(caddyhttp.HandlerError); ok && he.StatusCode > 0 {
			code = he.StatusCode
		}
	}
	if s := fsrv.StatusCode.String(); s != "" {
		n, err := strconv.Atoi(repl.ReplaceAll(s, ""))
		if err != nil {
			return 0, caddyhttp.Error(http.StatusInternalServerError, err)
		}
		code = n
	}
	return code, nil
}

const (
	defaultMaxRanges = 16
	separator        = string(filepath.Separator)
)

// Interface guards
var (
	_ caddy.Provisioner           = (*FlashServe)(nil)
	_ caddy.Validator             = (*FlashServe)(nil)
	_ caddy.CleanerUpper          = (*FlashServe)(nil)
	_ caddyhttp.MiddlewareHandler = (*FlashServe)(nil)
)
