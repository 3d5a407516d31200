package flashserve

import (
	"context"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// Prewarm has to know the site root before any request arrives, but the
// usual Caddyfile sets it with a separate directive (`root * /srv`), which
// becomes a vars handler in a route before this handler's, invisible to
// Provision. Once the config runs, its routes are read to find the root
// that surely applies to every request reaching this handler.

// defaultRoot is the root of a handler configured without one: whatever
// the `root` directive put in the request's vars.
const defaultRoot = "{http.vars.root}"

// rootState is what a walk of the routes knows of the root at a point.
type rootState struct {
	root string
	// certain says every request that gets this far had root set to
	// exactly root ("" meaning no vars handler set it).
	certain bool
	// why says what made the root uncertain.
	why string
}

// routeRoot walks routes in the order Caddy runs them, looking for
// target. It returns whether target was found, and the root state that
// holds when target runs (or after the routes, if it was not found).
func routeRoot(routes caddyhttp.RouteList, target caddyhttp.MiddlewareHandler, st rootState) (bool, rootState) {
	// groups of earlier routes that may or may not have set the root,
	// depending on their matchers.
	var maybe []string
	whenFound := func(group string, s rootState) (bool, rootState) {
		for _, g := range maybe {
			// A route of the same group that matched would have kept
			// target's route from running: its root does not apply.
			if g == "" || g != group {
				if s.certain {
					s.certain, s.why = false, "a root is set under a matcher this handler does not share"
				}
			}
		}
		return true, s
	}
	for _, rt := range routes {
		cur := st
		for _, h := range rt.Handlers {
			if h == target {
				return whenFound(rt.Group, cur)
			}
			switch v := h.(type) {
			case *caddyhttp.VarsMiddleware:
				raw, ok := (*v)["root"]
				if !ok {
					continue
				}
				// A vars handler on the way to target runs for every
				// request that reaches it: what it sets is the root.
				switch s, isString := raw.(string); {
				case !isString:
					cur = rootState{why: "the root is not a string"}
				case strings.Contains(s, "{"):
					cur = rootState{why: "the root has a placeholder"}
				default:
					cur = rootState{root: s, certain: true}
				}
			case *caddyhttp.Subroute:
				found, inner := routeRoot(v.Routes, target, cur)
				if found {
					return whenFound(rt.Group, inner)
				}
				cur = inner
			}
		}
		if cur == st {
			continue
		}
		switch {
		case len(rt.MatcherSets) == 0:
			// Runs for every request that gets here; a root it sets for
			// sure replaces whatever earlier routes may have set.
			st = cur
			if cur.certain {
				maybe = nil
			}
		case rt.Terminal:
			// If it matched, nothing after it runs: its root never
			// reaches a later handler.
		default:
			maybe = append(maybe, rt.Group)
		}
	}
	if len(maybe) > 0 && st.certain {
		st.certain, st.why = false, "a root is set under a matcher this handler does not share"
	}
	return false, st
}

// appRoot finds target in the http app's servers and returns the root
// state when it runs.
func appRoot(app *caddyhttp.App, target caddyhttp.MiddlewareHandler) (bool, rootState) {
	for _, srv := range app.Servers {
		if found, st := routeRoot(srv.Routes, target, rootState{certain: true}); found {
			return true, st
		}
		if srv.Errors != nil {
			// Error routes run after the main routes, whose root
			// depends on the request.
			start := rootState{why: "error routes see the root the failed request had"}
			if found, st := routeRoot(srv.Errors.Routes, target, start); found {
				return true, st
			}
		}
	}
	return false, rootState{}
}

// runningRoot waits until the config that holds fsrv is the running one,
// then returns the directory its routes give as root for every request.
// ok is false, with the reason, when the routes do not settle it (a
// placeholder, a root under a matcher) or fsrv is not in an http app; it
// returns early, with ok false and no reason, when ctx ends.
// A root that a request passes on fromRequest first is taken instead.
func (fsrv *FlashServe) runningRoot(ctx context.Context, fromRequest <-chan string) (root string, ok bool, why string) {
	// Caddy has no hook for "this config now runs": it makes the new
	// config the active one once its apps have started. Polling is cheap
	// (a pointer comparison per handler) and ends at the first match.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if app, err := caddy.ActiveContext().AppIfConfigured("http"); err == nil {
			if httpApp, isHTTP := app.(*caddyhttp.App); isHTTP {
				if found, st := appRoot(httpApp, fsrv); found {
					if !st.certain {
						return "", false, st.why
					}
					return fsrv.roots.canonical(st.root), true, ""
				}
			}
		}
		select {
		case <-ctx.Done():
			return "", false, ""
		case r := <-fromRequest:
			return r, true, "" // already canonical
		case <-tick.C:
		}
	}
}
