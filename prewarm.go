package flashserve

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/flashserve/caddy-flash-serve/internal/hotset"
	"github.com/flashserve/caddy-flash-serve/prewarm"
	"github.com/flashserve/caddy-flash-serve/transmit"
)

const (
	defaultPrewarmBudget = 1 << 30
	// hotSetFiles bounds a saved hot set: room for a uniformly requested
	// tree of 100,000 files (the bench's e), about 7 MB of JSON; within
	// it, the prewarm budget bounds the set, so that it holds what a
	// warm-up can read.
	hotSetFiles = 1 << 17
	hotSetEvery = 30 * time.Second
	// hotSetProbes bounds the files whose residency is probed after a
	// save, for the metrics: a sample of a large set, not each file.
	hotSetProbes = 1000
	// busyWindow is how long after a response a warm-up still counts
	// requests as being served, and reads one batch at a time.
	busyWindow = 100 * time.Millisecond
	// fdPressureWindow is how long after the server found the fd table
	// full a warm-up still backs off.
	fdPressureWindow = time.Second
	prewarmLogEvery  = 5 * time.Second
	// defaultPrewarmBusyRate bounds the paths and keep_hot passes while
	// requests are served (prewarm_busy_rate). In the bench's j (100,000
	// files of 8 KiB on a virtio disk, two cores), what the paths pass
	// read after the hot set cost the requests beside it more than its
	// threads' CPU said; at 4 MiB/s a busy server still gets the rest of
	// a tree of 1 GiB into the page cache in about four minutes.
	defaultPrewarmBusyRate = 4 << 20
)

// prewarmRun is one handler's background warm-up: cancelled when the
// config that made it is unloaded (a reload), waited for in Cleanup.
type prewarmRun struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// roots receives the site root from the first request when the root
	// is a placeholder, which only a request can resolve.
	roots    chan string
	rootOnce sync.Once
	// configDone is the Done channel of the config that made the run.
	configDone <-chan struct{}
}

func (p *prewarmRun) stop() {
	p.cancel()
	p.wg.Wait()
}

// seeRoot passes the first request's root to a warm-up that waits for it.
func (p *prewarmRun) seeRoot(root string) {
	p.rootOnce.Do(func() { p.roots <- root })
}

// lastHotSet describes the hot set a saver last wrote, for the metrics:
// its size, how much of it was in the page cache then, and the part of it
// whose residency this process could not know (files it neither owns nor
// may write).
var lastHotSet struct{ bytes, resident, unknown atomic.Int64 }

// startHotSaver starts the saver of the shared cache's hot set, once per
// cache: it belongs to the cache, so it runs on across the reloads that
// keep the cache, and Destruct stops it with a last save. The set holds
// at most budget bytes: the prewarm budget of the handler provisioned
// last.
func (s *sharedCache) startHotSaver(cacheKey string, budget int64, logger *zap.Logger) *hotset.Saver {
	started := false
	s.hotOnce.Do(func() {
		started = true
		s.hot = hotset.StartSaver(hotSetPath(cacheKey), s.HotSet(), hotSetFiles, budget, hotSetEvery, func(files []hotset.File, err error) {
			if err != nil {
				logger.Warn("saving the hot set", zap.String("file", hotSetPath(cacheKey)), zap.Error(err))
			}
			recordHotSet(files)
		})
	})
	if !started {
		s.hot.SetBytes(budget)
	}
	return s.hot
}

// recordHotSet measures how much of a saved hot set is in the page cache:
// every file of a small set, an even sample of hotSetProbes files of a
// large one, scaled to the bytes of the whole.
func recordHotSet(files []hotset.File) {
	step := max(1, (len(files)+hotSetProbes-1)/hotSetProbes)
	var total int64
	rs := make([]prewarm.Residency, 0, min(len(files), hotSetProbes))
	for i, f := range files {
		total += f.Size
		if i%step != 0 {
			continue
		}
		if r, err := prewarm.FileResidency(f.Path); err == nil {
			rs = append(rs, r)
		}
	}
	sum := prewarm.Summarize(rs)
	if step > 1 {
		if sum.Bytes > 0 {
			scale := float64(total) / float64(sum.Bytes)
			sum.Resident = int64(float64(sum.Resident) * scale)
			sum.UnknownBytes = int64(float64(sum.UnknownBytes) * scale)
		}
		sum.Bytes = total
	}
	lastHotSet.bytes.Store(sum.Bytes)
	lastHotSet.resident.Store(sum.Resident)
	lastHotSet.unknown.Store(sum.UnknownBytes)
}

// responses watches the responses begun and in flight, for a warm-up's
// Busy (and, with no inFlight, any count that moves: the fd table found
// full, for its FDPressure).
type responses struct {
	// count counts the responses begun; inFlight, if set, those not
	// finished.
	count, inFlight func() int64
	window          time.Duration

	mu   sync.Mutex
	seen int64
	at   time.Time // when seen changed
}

// serving reports whether a response is in flight, or one began in the
// last window.
func (r *responses) serving() bool {
	if r.inFlight != nil && r.inFlight() > 0 {
		return true
	}
	n := r.count()
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if n != r.seen {
		r.seen, r.at = n, now
		return true
	}
	return now.Sub(r.at) < r.window
}

// sent tells the warm-ups whether this process is serving requests: a
// response in flight (a large body to a slow client for minutes) or one
// begun in the last busyWindow (a stream of 304s, each done in
// microseconds). They then read one batch at a time (Warmer.Busy), so as
// not to slow the requests they are meant to help. It reads the
// handler's counters; the request path pays two atomic adds for it.
var sent = &responses{window: busyWindow, count: counters.begun.Load, inFlight: func() int64 {
	// ended first: every response ended has begun, so the difference
	// cannot go below zero however the two loads interleave with them.
	ended := counters.ended.Load()
	return counters.begun.Load() - ended
}}

// coldRequests tells the warm-up of the saved hot set after a start
// whether requests are waiting for the disk: a body found outside the page
// cache (and read through the ring) in the last busyWindow. It then reads
// at full width (Warmer.Cold): after a restart on a cold page cache what
// it reads is what those requests wait for. The paths and keep_hot passes
// are Background, cold requests or not: the tree the one walks is not
// what the clients asked for, and the other reads a set that is mostly
// resident while a long tail of other files is read cold.
var coldRequests coldSignal

type coldSignal struct{}

// serving reports whether a body met the disk in the last busyWindow.
func (coldSignal) serving() bool {
	at := transmit.Snapshot().LastColdBody
	return at != 0 && time.Now().UnixNano()-at < int64(busyWindow)
}

// hotSetPath is where the hot set of a cache is kept: one file per cache
// settings, in Caddy's data directory.
func hotSetPath(cacheKey string) string {
	return hotset.Path(filepath.Join(caddy.AppDataDir(), "flash_serve"), cacheKey)
}

// startPrewarm starts the warm-up in the background; Provision never
// waits for it.
func (fsrv *FlashServe) startPrewarm(ctx caddy.Context) {
	logger := fsrv.logger.Named("prewarm")
	runCtx, cancel := context.WithCancel(ctx)
	run := &prewarmRun{cancel: cancel, roots: make(chan string, 1), configDone: ctx.Done()}
	fsrv.prewarm = run
	budget := fsrv.PrewarmBudget
	if budget == 0 {
		budget = defaultPrewarmBudget
	}
	saver := fsrv.shared.startHotSaver(fsrv.cacheKey, budget, logger)
	workers := fsrv.PrewarmWorkers
	if workers == 0 {
		workers = 2
	}
	busyRate := fsrv.PrewarmBusyRate
	if busyRate == 0 {
		busyRate = defaultPrewarmBusyRate
	}
	hotPath := saver.Path()
	// The warm-ups back off (fewer descriptors, a pause) while the server
	// finds the fd table full: its cache shed descriptors, or a request
	// got a 503 for it, in the last fdPressureWindow.
	shed := &responses{window: fdPressureWindow, count: func() int64 {
		return fsrv.cache.ShedCount() + counters.fdExhausted.Load()
	}}
	shed.seen = shed.count() // what was found before this warm-up is no pressure now
	fdPressure := shed.serving
	run.wg.Add(1)
	go func() {
		defer run.wg.Done()
		// The hot set first, at once: it names absolute paths, and it is
		// what the clients asked for most before the restart.
		hotTargets, err := prewarm.HotTargets(hotPath)
		if err != nil {
			logger.Warn("ignoring the hot set", zap.Error(err))
		}
		hot := dedupeTargets(hotTargets)
		used := warm(runCtx, logger, hot, budget, workers, "hot set", fsrv.ringReader(), fdPressure, busyRate)
		if budget -= used; budget <= 0 {
			return
		}
		root, ok := fsrv.prewarmRoot(runCtx, logger, run.roots)
		if !ok {
			return
		}
		// The walk stats every file under the paths: it takes turns with
		// the requests as the paths pass does (a twentieth of a core while
		// they are served).
		more, err := passWarmer("paths", busyRate).Expand(runCtx, root, fsrv.Prewarm)
		if runCtx.Err() != nil {
			return
		}
		if err != nil {
			logger.Warn("expanding prewarm paths", zap.String("root", root), zap.Error(err))
		}
		warm(runCtx, logger, withoutTargets(dedupeTargets(more), hot), budget, workers, "paths", fsrv.ringReader(), fdPressure, busyRate)
		if fsrv.KeepHot <= 0 {
			return
		}
		t := time.NewTicker(time.Duration(fsrv.KeepHot))
		defer t.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
				// The saved snapshot, not a fresh one: the saver decays
				// the counts after each snapshot it takes.
				targets, _ := prewarm.HotTargets(hotPath)
				warm(runCtx, logger, targets, budget, workers, "keep_hot", fsrv.ringReader(), fdPressure, busyRate)
			}
		}
	}()
}

// prewarmRoot returns the directory the prewarm paths are under: the
// configured root; else the root the running config's routes set before
// this handler (`root * /srv`); else, said once at INFO, the first
// request's. ok is false when ctx ends first.
func (fsrv *FlashServe) prewarmRoot(ctx context.Context, logger *zap.Logger, fromRequest <-chan string) (string, bool) {
	if fsrv.roots.static != "" {
		return fsrv.roots.static, true
	}
	why := "the root has a placeholder"
	if fsrv.Root == defaultRoot {
		root, ok, reason := fsrv.runningRoot(ctx, fsrv.prewarm.configDone, fromRequest)
		if ok {
			return root, true
		}
		if ctx.Err() != nil {
			return "", false
		}
		why = reason
	}
	logger.Info("prewarm waits for the first request to learn the site root",
		zap.String("root", fsrv.Root), zap.String("reason", why))
	select {
	case root := <-fromRequest:
		return root, true // siteRoot made it canonical
	case <-ctx.Done():
		return "", false
	}
}

// withoutTargets returns ts less the paths in seen.
func withoutTargets(ts, seen []prewarm.Target) []prewarm.Target {
	if len(seen) == 0 {
		return ts
	}
	skip := make(map[string]bool, len(seen))
	for _, t := range seen {
		skip[t.Path] = true
	}
	out := ts[:0]
	for _, t := range ts {
		if !skip[t.Path] {
			out = append(out, t)
		}
	}
	return out
}

// warm runs one warm-up and logs its progress and summary; pass names it
// in the logs ("hot set", "paths" or "keep_hot"); busyRate bounds the
// background passes while requests are served (passWarmer). It returns
// the budget it spent: the bytes it read in whole pages, as the budget is
// counted.
func warm(ctx context.Context, logger *zap.Logger, targets []prewarm.Target, budget int64, workers int, pass string, readAt prewarm.ReaderAt, fdPressure func() bool, busyRate int64) int64 {
	if len(targets) == 0 {
		return 0
	}
	w := passWarmer(pass, busyRate)
	w.Budget, w.Workers, w.Every, w.ReadAt, w.FDPressure = budget, workers, prewarmLogEvery, readAt, fdPressure
	w.OnProgress = func(p prewarm.Progress) {
		fields := []zap.Field{
			zap.String("pass", pass), zap.Int64("files", p.Files), zap.Int64("bytes", p.Bytes),
			zap.Float64("percent_of_budget", 100*float64(p.Bytes)/float64(max(1, p.Budget))),
			zap.Float64("mb_per_sec", p.Rate()/1e6),
		}
		if p.Done {
			logger.Info("prewarm done", append(fields, zap.Duration("took", time.Since(p.Started)))...)
			return
		}
		logger.Info("prewarm progress", fields...)
	}
	handlerWarmups.Add(1)
	p, err := w.Run(ctx, targets)
	handlerWarmups.Add(-1)
	if err != nil && ctx.Err() == nil {
		logger.Warn("prewarm stopped early", zap.String("pass", pass), zap.Error(err))
	}
	return p.Spent
}

// passWarmer is how a pass yields to the requests. The hot set at
// start-up is what the clients asked for most: it reads at full width
// while requests wait for the disk (Cold) and takes a quarter of a core
// while they are served from memory. The paths and keep_hot passes read
// what no request is known to wait for (the rest of a tree, a set mostly
// resident): Background, a twentieth of a core while requests are served,
// cold or not, as an operator who ran a warm-up beside nginx would have
// it run under `nice 19`. After a restart the paths pass would otherwise
// take a quarter of the core from the requests the hot set just made
// fast, for as long as it walks the tree. The background passes also read
// at most busyRate bytes a second while requests are served
// (prewarm_busy_rate): the disk's completions of what they read, and the
// page cache's work to take it in, are on no clock of theirs.
func passWarmer(pass string, busyRate int64) *prewarm.Warmer {
	w := &prewarm.Warmer{Busy: sent.serving}
	if pass == "hot set" {
		w.Cold = coldRequests.serving
	} else {
		w.Background, w.BusyRate = true, busyRate
	}
	return w
}

func dedupeTargets(ts []prewarm.Target) []prewarm.Target {
	seen := make(map[string]bool, len(ts))
	out := ts[:0]
	for _, t := range ts {
		if abs, err := filepath.Abs(t.Path); err == nil {
			t.Path = abs
		}
		if !seen[t.Path] {
			seen[t.Path] = true
			out = append(out, t)
		}
	}
	return out
}

// ringReader reads through the handler's io_uring, or is nil without one.
func (fsrv *FlashServe) ringReader() prewarm.ReaderAt {
	if fsrv.sender.Ring == nil {
		return nil
	}
	return fsrv.sender.Ring.ReadLending
}
