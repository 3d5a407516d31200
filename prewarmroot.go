package flashserve

import (
	"context"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

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
