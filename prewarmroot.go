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

// routeWalk is what a walk of one server's routes reads besides them: the
// server's named routes, which `invoke` runs with the rest of the chain as
// their next, and how deep the walk is in them (a named route may invoke
// itself, under a matcher).
type routeWalk struct {
	named map[string]*caddyhttp.Route
	depth int
}

// Why a walk cannot settle a root it finds target under, unless those
// routes set it themselves before target.
const (
	errorRoutesWhy = "error routes see the root the failed request had"
	namedRouteWhy  = "the handler is in a named route, which each invoke runs with its own root"
)

// maxNamedDepth bounds the named routes a walk enters one in another.
const maxNamedDepth = 8

// routeRoot walks routes in the order Caddy runs them, looking for
// target. It returns whether target was found, and the root state that
// holds when target runs (or after the routes, if it was not found).
func routeRoot(routes caddyhttp.RouteList, target caddyhttp.MiddlewareHandler, st rootState) (bool, rootState) {
	return routeWalk{}.routeRoot(routes, target, st)
}

func (rw routeWalk) routeRoot(routes caddyhttp.RouteList, target caddyhttp.MiddlewareHandler, st rootState) (bool, rootState) {
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
				found, inner := rw.routeRoot(v.Routes, target, cur)
				if found {
					return whenFound(rt.Group, inner)
				}
				cur = inner
				if v.Errors != nil {
					// They end the chain: no root they set reaches a
					// later handler, but target may be one of them.
					if found, est := rw.routeRoot(v.Errors.Routes, target, rootState{why: errorRoutesWhy}); found {
						return true, est
					}
				}
			case *caddyhttp.Invoke:
				named, ok := rw.named[v.Name]
				if !ok {
					continue // answers an error at run time: nothing after it runs
				}
				if rw.depth >= maxNamedDepth {
					cur = rootState{why: "named routes invoke each other too deep to follow"}
					continue
				}
				inner := routeWalk{named: rw.named, depth: rw.depth + 1}
				found, st := inner.routeRoot(caddyhttp.RouteList{*named}, target, cur)
				if found {
					// Another invoke of the same named route may run it
					// with another root: only a root the named route
					// sets itself is settled.
					_, st = inner.routeRoot(caddyhttp.RouteList{*named}, target, rootState{why: namedRouteWhy})
					return true, st
				}
				cur = st
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
		rw := routeWalk{named: srv.NamedRoutes}
		if found, st := rw.routeRoot(srv.Routes, target, rootState{certain: true}); found {
			return true, st
		}
		if srv.Errors != nil {
			// Error routes run after the main routes, whose root
			// depends on the request.
			start := rootState{why: errorRoutesWhy}
			if found, st := rw.routeRoot(srv.Errors.Routes, target, start); found {
				return true, st
			}
		}
		// A named route that no route invokes is still provisioned.
		for _, named := range srv.NamedRoutes {
			if found, st := rw.routeRoot(caddyhttp.RouteList{*named}, target, rootState{why: namedRouteWhy}); found {
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
// configDone is the Done channel of the config that holds fsrv, which is
// the active context's once that config runs.
func (fsrv *FlashServe) runningRoot(ctx context.Context, configDone <-chan struct{}, fromRequest <-chan string) (root string, ok bool, why string) {
	// Caddy has no hook for "this config now runs": it makes the new
	// config the active one once its apps have started. Polling is cheap
	// (a pointer comparison per handler) and ends at the first match.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		active := caddy.ActiveContext()
		if app, err := active.AppIfConfigured("http"); err == nil {
			if httpApp, isHTTP := app.(*caddyhttp.App); isHTTP {
				if found, st := appRoot(httpApp, fsrv); found {
					if !st.certain {
						return "", false, st.why
					}
					return fsrv.roots.canonical(st.root), true, ""
				}
			}
		}
		// The config that holds fsrv runs (its context is the active
		// one) and the walk did not find fsrv: it is somewhere the walk
		// does not read (a reverse_proxy's or intercept's handle_response),
		// and polling on would never end.
		if active.Context != nil && configDone != nil && active.Done() == configDone {
			return "", false, "the handler is in routes the walk does not read (handle_response)"
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
