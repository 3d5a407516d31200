package flashserve

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/dustin/go-humanize"

	"github.com/flashserve/caddy-flash-serve/prewarm"
	"github.com/flashserve/caddy-flash-serve/transmit"
)

func init() {
	caddy.RegisterModule(AdminAPI{})
}

// AdminAPI adds flash_serve's endpoints to Caddy's admin API:
//
//	GET  /flash_serve/         the status page for a browser (Accept: text/html), else the stats
//	GET  /flash_serve/stats    the module's counters as JSON
//	POST /flash_serve/purge    {"path": "/srv/www/a.txt"} or {"prefix": "/srv/www/dl/"}
//	POST /flash_serve/prewarm  {"root": "/srv/www", "paths": ["iso/*"], "budget": "2GiB", "wait": false}
//
// Paths are filesystem paths, as the cache knows them, not request paths:
// one cache serves every site with the same settings, whatever their roots.
type AdminAPI struct {
	ctx caddy.Context
}

// CaddyModule returns the Caddy module information.
func (AdminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.flash_serve",
		New: func() caddy.Module { return new(AdminAPI) },
	}
}

// Provision implements caddy.Provisioner.
func (a *AdminAPI) Provision(ctx caddy.Context) error {
	a.ctx = ctx
	return registerMetrics(ctx)
}

// Routes implements caddy.AdminRouter.
func (a *AdminAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{
		{Pattern: "/flash_serve/", Handler: caddy.AdminHandlerFunc(a.statusIndex)},
		{Pattern: "/flash_serve/stats", Handler: caddy.AdminHandlerFunc(a.stats)},
		{Pattern: "/flash_serve/purge", Handler: caddy.AdminHandlerFunc(a.purge)},
		{Pattern: "/flash_serve/prewarm", Handler: caddy.AdminHandlerFunc(a.prewarm)},
	}
}

func (a *AdminAPI) stats(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return methodNotAllowed(r.Method, http.MethodGet)
	}
	return writeJSON(w, http.StatusOK, snapshot())
}

// purgeRequest names what to drop from the caches.
type purgeRequest struct {
	// Path drops one entry.
	Path string `json:"path,omitempty"`
	// Prefix drops every entry at or below a directory ("/" for all).
	Prefix string `json:"prefix,omitempty"`
}

func (a *AdminAPI) purge(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodPost {
		return methodNotAllowed(r.Method, http.MethodPost)
	}
	var req purgeRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if (req.Path == "") == (req.Prefix == "") {
		return badRequest(fmt.Errorf("give exactly one of path and prefix"))
	}
	target := req.Path + req.Prefix
	if !filepath.IsAbs(target) {
		return badRequest(fmt.Errorf("%q is not an absolute filesystem path", target))
	}
	target = filepath.Clean(target)
	purged := 0
	caches.Range(func(_, v any) bool {
		purged += v.(*sharedCache).Purge(target, req.Prefix != "")
		return true
	})
	return writeJSON(w, http.StatusOK, map[string]int{"purged": purged})
}

// prewarmRequest asks for files to be read into the page cache.
type prewarmRequest struct {
	// Root is the directory the paths are under; they cannot leave it.
	Root string `json:"root"`
	// Paths are files, directories or globs under Root; "*" is all of it.
	// Default: ["*"].
	Paths []string `json:"paths,omitempty"`
	// Budget is the most bytes to read: a number or a size such as "2GiB".
	// Default: 1GiB.
	Budget json.RawMessage `json:"budget,omitempty"`
	// Workers is how many files are read at once. Default: 1.
	Workers int `json:"workers,omitempty"`
	// Wait makes the request return when the warm-up is done, with its
	// figures; otherwise it returns at once with what was planned.
	Wait bool `json:"wait,omitempty"`
}

func (a *AdminAPI) prewarm(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodPost {
		return methodNotAllowed(r.Method, http.MethodPost)
	}
	var req prewarmRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if !filepath.IsAbs(req.Root) {
		return badRequest(fmt.Errorf("root %q is not an absolute directory", req.Root))
	}
	if len(req.Paths) == 0 {
		req.Paths = []string{"*"}
	}
	budget, err := parseBudget(req.Budget)
	if err != nil {
		return badRequest(err)
	}
	if req.Workers < 0 || req.Workers > 64 {
		return badRequest(fmt.Errorf("workers: %d is outside 0..64", req.Workers))
	}
	root := filepath.Clean(req.Root) // the key of its runs
	if err := checkPath("root", root, true); err != nil {
		return badRequest(err)
	}
	// One run per root and maxAdminPrewarms at once: a request for a root
	// being warmed with the same paths, budget and workers joins its run;
	// the root is walked only by the request that claims it.
	run, claimed, err := joinOrClaim(w, root, askedFor(req.Paths, budget, req.Workers), req.Wait)
	if err != nil {
		return err
	}
	if claimed {
		targets, err := prewarm.Expand(root, req.Paths)
		if err != nil {
			run.forget(err)
			return badRequest(err)
		}
		var planned int64
		for _, t := range targets {
			planned += t.Size
		}
		run.planned = map[string]any{"files": len(targets), "bytes": planned, "budget": budget}
		warmer := &prewarm.Warmer{Budget: budget, Workers: prewarmWorkers(req.Workers, budget)}
		if ring := transmit.SharedRing(); ring != nil {
			warmer.ReadAt = ring.ReadLending
		}
		// The warm-up outlives the request but not the config: a reload or
		// a stop cancels it.
		run.start(a.ctx, warmer, targets)
	}
	if !req.Wait {
		planned := run.plannedAnswer(r.Context())
		if planned == nil {
			if r.Context().Err() != nil {
				return nil // the client has gone
			}
			return badRequest(fmt.Errorf("%v", run.result["error"])) // the run's root failed to expand
		}
		ans := map[string]any{"joined": !claimed}
		for k, v := range planned {
			ans[k] = v
		}
		return writeJSON(w, http.StatusAccepted, ans)
	}
	res := run.wait(r.Context())
	if res == nil {
		return nil // the client has gone
	}
	return writeJSON(w, http.StatusOK, res)
}

// addResidency adds to a waited prewarm's answer how much of the targets
// is in the page cache now: resident_bytes of the files whose residency
// the server can know (null when none), and unknown_files and
// unknown_bytes for the others, files it neither owns nor may write, for
// which mincore would report a false 100 %.
func addResidency(res map[string]any, targets []prewarm.Target) {
	rs := make([]prewarm.Residency, 0, len(targets))
	for _, t := range targets {
		if r, err := prewarm.FileResidency(t.Path); err == nil {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return // not on this OS, or the files are gone
	}
	sum := prewarm.Summarize(rs)
	res["resident_bytes"] = nil
	if sum.AnyKnown() {
		res["resident_bytes"] = sum.Resident
	}
	res["known"] = sum.Known()
	res["unknown_files"], res["unknown_bytes"] = sum.UnknownFiles, sum.UnknownBytes
}

// parseBudget reads a budget given as a number of bytes or a size string.
func parseBudget(raw json.RawMessage) (int64, error) {
	if len(raw) == 0 {
		return defaultPrewarmBudget, nil
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err == nil {
		if n < 1 {
			return 0, fmt.Errorf("budget must be more than 0")
		}
		return n, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, fmt.Errorf("budget: want a number of bytes or a size such as \"2GiB\"")
	}
	u, err := humanize.ParseBytes(s)
	if err != nil || u < 1 || u > 1<<50 {
		return 0, fmt.Errorf("budget: %q is not a size such as \"2GiB\"", s)
	}
	return int64(u), nil
}

func decodeJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest(fmt.Errorf("decoding the request body: %w", err))
	}
	return nil
}

// writeJSON answers status with v as its JSON body. The Content-Type is
// set before WriteHeader, after which header changes are not sent.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	return json.NewEncoder(w).Encode(v)
}

func badRequest(err error) error {
	return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: err}
}

func methodNotAllowed(got string, allowed ...string) error {
	return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed,
		Err: fmt.Errorf("method %s not allowed; use %s", got, strings.Join(allowed, ", "))}
}

// Interface guards
var (
	_ caddy.Provisioner = (*AdminAPI)(nil)
	_ caddy.AdminRouter = (*AdminAPI)(nil)
)
