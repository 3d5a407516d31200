package flashserve

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/flashserve/caddy-flash-serve/prewarm"
)

// maxAdminPrewarms bounds the admin API's warm-ups of different roots at
// once (each holds read buffers, descriptors and its file list); a request
// past it is answered 429 without walking its root.
const maxAdminPrewarms = 2

// adminRuns are the warm-ups the admin API runs now, one per root.
var adminRuns = struct {
	sync.Mutex
	byRoot map[string]*adminRun
}{byRoot: make(map[string]*adminRun)}

// adminRun is one warm-up of the admin API. A request for its root that
// asks for the same paths, budget and workers joins it; any other request
// for that root is refused (409) while it runs.
type adminRun struct {
	root, asked string // asked: the paths, budget and workers, for joiners
	started     time.Time
	cancel      context.CancelFunc
	// planned is the 202 answer: the files and bytes it plans to read,
	// set before ready is closed (nil if the root failed to expand).
	planned map[string]any
	ready   chan struct{}
	// done is closed when the run has ended and result holds its 200
	// answer.
	done   chan struct{}
	result map[string]any
	// Guarded by adminRuns: waiters counts the requests waiting for the end;
	// detached is set once a request that does not wait started or joined it.
	// A run with neither ends.
	waiters  int
	detached bool
}

// askedFor is what a request for a root asks of its warm-up, compared to
// join a run already going.
func askedFor(paths []string, budget int64, workers int) string {
	return fmt.Sprintf("%q %d %d", paths, budget, workers)
}

// joinOrClaim joins the run of root if it reads what asked says, or
// claims root for a new run (claimed). It refuses a request for a root
// whose run reads something else (409) and one past maxAdminPrewarms
// (429, with Retry-After).
func joinOrClaim(w http.ResponseWriter, root, asked string, wait bool) (run *adminRun, claimed bool, err error) {
	adminRuns.Lock()
	defer adminRuns.Unlock()
	if run := adminRuns.byRoot[root]; run != nil {
		if run.asked != asked {
			return nil, false, caddy.APIError{HTTPStatus: http.StatusConflict, Err: fmt.Errorf(
				"a prewarm of %s with other paths, budget or workers has been running for %s; ask again when it ends",
				root, time.Since(run.started).Round(time.Second))}
		}
		run.join(wait)
		return run, false, nil
	}
	if len(adminRuns.byRoot) >= maxAdminPrewarms {
		roots := runningRootsLocked()
		w.Header().Set("Retry-After", "10")
		return nil, false, caddy.APIError{HTTPStatus: http.StatusTooManyRequests, Err: fmt.Errorf(
			"%d prewarms are running (%s), the most at once; ask again when one ends", len(roots), strings.Join(roots, ", "))}
	}
	run = &adminRun{root: root, asked: asked, started: time.Now(), ready: make(chan struct{}), done: make(chan struct{})}
	run.join(wait)
	adminRuns.byRoot[root] = run
	return run, true, nil
}

// join counts a request that waits for the run, or marks it detached.
// Called with adminRuns held.
func (run *adminRun) join(wait bool) {
	if wait {
		run.waiters++
	} else {
		run.detached = true
	}
}

// forget removes a claimed run that never started (its root failed to
// expand): its waiters, if any joined meanwhile, get err.
func (run *adminRun) forget(err error) {
	adminRuns.Lock()
	delete(adminRuns.byRoot, run.root)
	adminRuns.Unlock()
	run.result = map[string]any{"files": 0, "bytes": 0, "error": err.Error()}
	close(run.ready)
	close(run.done)
}

// plannedAnswer waits until the run knows what it plans to read, and
// returns that (the 202 answer), or nil when the request ends first or the
// run never started.
func (run *adminRun) plannedAnswer(ctx context.Context) map[string]any {
	select {
	case <-run.ready:
		return run.planned
	case <-ctx.Done():
		return nil
	}
}

// start runs the warm-up of targets in the background, until it is done,
// ctx (the config's) ends, or nobody that asked for it waits any more.
func (run *adminRun) start(ctx context.Context, warmer *prewarm.Warmer, targets []prewarm.Target) {
	ctx, cancel := context.WithCancel(ctx)
	adminRuns.Lock()
	run.cancel = cancel
	if run.waiters == 0 && !run.detached {
		cancel() // every waiter left while the root was walked
	}
	adminRuns.Unlock()
	close(run.ready)
	go func() {
		defer cancel()
		p, err := warmer.Run(ctx, targets)
		res := map[string]any{"files": p.Files, "bytes": p.Bytes, "budget": warmer.Budget,
			"seconds": time.Since(p.Started).Seconds(), "mb_per_sec": p.Rate() / 1e6}
		if err != nil {
			res["error"] = err.Error()
		}
		adminRuns.Lock()
		waited := run.waiters > 0
		adminRuns.Unlock()
		if waited {
			addResidency(res, targets)
		}
		adminRuns.Lock()
		delete(adminRuns.byRoot, run.root)
		adminRuns.Unlock()
		run.result = res
		close(run.done)
	}()
}

// wait waits for the run's end and returns its answer, or returns nil
// when the request ends first; the last waiter of a run that no request
// asked to go on without it cancels it.
func (run *adminRun) wait(ctx context.Context) map[string]any {
	select {
	case <-run.done:
		return run.result
	case <-ctx.Done():
	}
	adminRuns.Lock()
	run.waiters--
	stop := run.waiters == 0 && !run.detached && run.cancel != nil
	adminRuns.Unlock()
	if stop {
		run.cancel()
	}
	return nil
}

// prewarmWorkers is the workers a run gets: as asked (at least 1), but
// no more than the budget can keep busy with a read buffer each, so that
// its buffers stay within its budget.
func prewarmWorkers(asked int, budget int64) int {
	return int(max(1, min(int64(max(1, asked)), budget/prewarm.ReadBufferSize)))
}
