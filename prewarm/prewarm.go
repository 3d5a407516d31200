// Package prewarm loads files into the page cache within a budget and
// reports how much of a file is resident. It reads back the hot set that
// internal/hotset saved (HotTargets), so that a restarted server warms
// the files asked for most first.
package prewarm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flashserve/caddy-flash-serve/internal/fileio"
	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// pageSize is the unit of residency and of the budget.
var pageSize = int64(os.Getpagesize())

// Residency is how much of one file is in the page cache.
type Residency struct {
	Path string
	Size int64
	// Known is false when this process cannot find out: mincore(2) reports
	// every page resident to a process that neither owns the file nor may
	// write it, and reading the pages to find out would bring them in.
	// Resident is 0 then, and its JSON null.
	Known    bool
	Resident int64
}

// MarshalJSON writes {"path", "size", "known", "resident_bytes"}, with
// resident_bytes null when the residency is not known.
func (r Residency) MarshalJSON() ([]byte, error) {
	var resident *int64
	if r.Known {
		resident = &r.Resident
	}
	return json.Marshal(struct {
		Path     string `json:"path"`
		Size     int64  `json:"size"`
		Known    bool   `json:"known"`
		Resident *int64 `json:"resident_bytes"`
	}{r.Path, r.Size, r.Known, resident})
}

// Percent is the resident share of the file, 100 for an empty file; 0
// when the residency is not known.
func (r Residency) Percent() float64 {
	if !r.Known {
		return 0
	}
	if r.Size == 0 {
		return 100
	}
	return 100 * float64(min(r.Resident, r.Size)) / float64(r.Size)
}

// Summary adds up the residencies of many files, keeping apart those whose
// residency this process cannot know (UnknownFiles, UnknownBytes).
type Summary struct {
	Files, Bytes int64
	// Resident counts the resident bytes of the files in KnownBytes.
	Resident, KnownBytes       int64
	UnknownFiles, UnknownBytes int64
}

// Summarize adds up residencies.
func Summarize(rs []Residency) Summary {
	var s Summary
	for _, r := range rs {
		s.Files++
		s.Bytes += r.Size
		if r.Known {
			s.Resident += r.Resident
			s.KnownBytes += r.Size
		} else {
			s.UnknownFiles++
			s.UnknownBytes += r.Size
		}
	}
	return s
}

// Known reports whether the residency of every file is known.
func (s Summary) Known() bool { return s.UnknownFiles == 0 }

// AnyKnown reports whether the residency of some file is known, or there
// is no file at all: Resident and Percent then mean something.
func (s Summary) AnyKnown() bool { return s.Files == 0 || s.UnknownFiles < s.Files }

// Percent is the resident share of the bytes whose residency is known:
// 100 when those are empty files or none, 0 when nothing is known.
func (s Summary) Percent() float64 {
	if !s.AnyKnown() {
		return 0
	}
	if s.KnownBytes == 0 {
		return 100
	}
	return 100 * float64(min(s.Resident, s.KnownBytes)) / float64(s.KnownBytes)
}

// totals counts what every warm-up of the process has read (Snapshot).
var totals struct{ bytes, files atomic.Int64 }

// Totals is what every warm-up of the process has read so far: a file
// counts once it is read as far as its budget allowed.
type Totals struct {
	Bytes, Files int64
}

// Snapshot reads the process's warm-up totals now.
func Snapshot() Totals {
	return Totals{Bytes: totals.bytes.Load(), Files: totals.files.Load()}
}

// Progress is what a warm-up has done so far, counted as Totals.
type Progress struct {
	Files, Bytes int64
	// Spent is the budget the reads took, in whole pages: what is left of
	// a budget is the budget less Spent.
	Spent   int64
	Budget  int64
	Started time.Time // when Run began
	Done    bool      // set in the last report, when Run returns
}

// Rate is bytes per second since the start.
func (p Progress) Rate() float64 {
	d := time.Since(p.Started).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(p.Bytes) / d
}

// Target is one file to warm: Size bytes of it from the start, or fewer
// if the budget runs out.
type Target struct {
	Path string
	Size int64
}

// Warmer warms targets with a few workers until the budget is spent.
type Warmer struct {
	Budget int64 // bytes; <= 0 means no limit
	// Workers read at once, each a large file or a batch of up to
	// prefetchBatch small ones (which hold a thread only in the opens);
	// at least 1.
	Workers int
	// OnProgress, if set, is called every Every with a snapshot, and once
	// at the end with Done set.
	OnProgress func(Progress)
	Every      time.Duration
	// ReadAt, if set, reads files larger than batchFileMax instead of
	// pread: the handler passes its io_uring, so that a worker waiting
	// for the disk holds no OS thread.
	ReadAt ReaderAt
	// Busy, if set, reports whether requests are being served: the
	// workers then take turns (yielder), one batch or chunk at a time, so
	// that a warm-up takes little of the disk and of a core from the
	// requests it is meant to help.
	Busy func() bool
	// Cold, if set, reports whether the requests being served wait for
	// the disk themselves: the workers then read as with no request, since
	// the files a hot-set warm-up reads are those the requests wait for.
	Cold func() bool
	// Background marks a warm-up of files no request is known to wait
	// for: its turns take a twentieth of a core, and Cold is not asked.
	Background bool
	// BusyRate, if more than 0, bounds the bytes per second the reads take
	// while they take turns: pages read cost the requests more than the
	// warm-up's CPU (completions, page-cache inserts), unseen by its clock.
	BusyRate int64
	// FDPressure, if set, reports whether the server found the fd table
	// full lately: the warm-up then backs off as when its own open does.
	FDPressure func() bool

	files, bytes, spent atomic.Int64
	yield               atomic.Pointer[yielder] // the last Run's, for tests
	// For tests: prefetched is told of each batch file advised; verify
	// reads (and closes) a batch file instead of pread; cpu, pause and now
	// stand for the thread's CPU clock, the pause and the budget's clock.
	prefetched func(path string)
	verify     func(ctx context.Context, path string, f readFile, n int64) (int64, error)
	cpu        func() time.Duration
	pause      func(context.Context, time.Duration)
	now        func() time.Time
}

// Run warms the targets in order. The budget is counted in whole pages: a
// file that does not fit is warmed up to the last page that does, and
// nothing after it. It returns when done or when ctx is canceled.
func (w *Warmer) Run(ctx context.Context, targets []Target) (Progress, error) {
	workers := max(1, w.Workers)
	start := time.Now()
	// The budget is reserved in target order, so that the hottest files
	// are the ones that fit.
	var jobs []batchFile
	left := w.Budget
	for _, t := range targets {
		n := roundUp(t.Size)
		if w.Budget > 0 {
			if left <= 0 {
				break
			}
			if n > left {
				n = left / pageSize * pageSize
			}
			left -= n
		}
		if n > 0 {
			jobs = append(jobs, batchFile{path: t.Path, n: min(n, t.Size)})
		}
	}
	snapshot := func(done bool) Progress {
		return Progress{Files: w.files.Load(), Bytes: w.bytes.Load(), Spent: w.spent.Load(), Budget: w.Budget, Started: start, Done: done}
	}
	stop := make(chan struct{})
	var reporter sync.WaitGroup
	if w.OnProgress != nil && w.Every > 0 {
		reporter.Go(func() {
			t := time.NewTicker(w.Every)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					w.OnProgress(snapshot(false))
				}
			}
		})
	}
	yctx := ctx
	if y := w.newYielder(); y != nil {
		w.yield.Store(y)
		yctx = context.WithValue(ctx, yielderKey{}, y)
	}
	var firstErr atomic.Value
	done := func(n int64, err error) {
		w.bytes.Add(n)
		w.spent.Add(roundUp(n))
		totals.bytes.Add(n)
		switch {
		case err == nil:
			w.files.Add(1)
			totals.files.Add(1)
		case errors.Is(err, errSkipped):
		case ctx.Err() == nil:
			firstErr.CompareAndSwap(nil, err)
		}
	}
	gate := newFDGate(w.FDPressure)
	limit := fdTableSize()
	var mu sync.Mutex
	next := 0
	var back []batchFile // put back because the fd table was full: first
	// take hands a worker the next files in order: a large file alone, or
	// a batch of up to gate.batchLimit small ones that come in a row.
	take := func(batch []batchFile) []batchFile {
		limit := gate.batchLimit()
		mu.Lock()
		defer mu.Unlock()
		for len(batch) < limit {
			var b batchFile
			switch {
			case len(back) > 0:
				b = back[0]
			case next < len(jobs):
				b = jobs[next]
			default:
				return batch
			}
			if b.n > batchFileMax && len(batch) > 0 {
				break
			}
			if len(back) > 0 {
				back = back[1:]
			} else {
				next++
			}
			batch = append(batch, b)
			if b.n > batchFileMax {
				break
			}
		}
		return batch
	}
	// putBack queues again the files that found the fd table full, unless
	// it has been full for too long: then they fail with errNoDescriptor.
	putBack := func(opened int, batch []batchFile) {
		var again []batchFile
		for _, b := range batch {
			if errors.Is(b.err, errNoDescriptor) {
				again = append(again, batchFile{path: b.path, n: b.n})
			} else {
				done(b.got, b.err)
			}
		}
		if gate.opened(opened, len(again) > 0) {
			for range again {
				done(0, errNoDescriptor)
			}
			return
		}
		mu.Lock()
		back = append(again, back...)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			batch := make([]batchFile, 0, prefetchBatch)
			for ctx.Err() == nil {
				if gate.wait(ctx) != nil {
					return
				}
				batch = take(batch[:0])
				if len(batch) == 0 {
					return
				}
				opened := 1
				if batch[0].n > batchFileMax {
					b := &batch[0]
					if b.got, b.err = w.warm(yctx, b.path, b.n, limit); errors.Is(b.err, errNoDescriptor) {
						opened = 0
					}
				} else {
					opened = w.warmBatch(ctx, yctx, batch, limit)
				}
				putBack(opened, batch)
			}
		})
	}
	wg.Wait()
	close(stop)
	reporter.Wait()
	p := snapshot(true)
	if w.OnProgress != nil {
		w.OnProgress(p)
	}
	if err := ctx.Err(); err != nil {
		return p, err
	}
	if err, _ := firstErr.Load().(error); err != nil {
		return p, err
	}
	return p, nil
}

// newYielder returns the yielder of a Run or Expand, nil without Busy.
func (w *Warmer) newYielder() *yielder {
	if w.Busy == nil {
		return nil
	}
	y := &yielder{busy: w.Busy, cold: w.Cold, lane: make(chan struct{}, 1), cpu: threadCPU, pause: sleep, factor: busyPause}
	if w.Background {
		y.cold, y.factor = nil, backgroundPause
	}
	if w.cpu != nil {
		y.cpu, y.pause = w.cpu, w.pause
	}
	if w.BusyRate > 0 {
		y.budget = &byteBudget{perSec: w.BusyRate, now: time.Now}
		if w.now != nil {
			y.budget.now = w.now
		}
	}
	return y
}

// errSkipped is why a target that is gone, or no longer a regular file,
// is not warmed: no failure, since a hot set names the files of an
// earlier run.
var errSkipped = errors.New("not a regular file any more")

// fdTableSize reads the size of the fd table, once per Run: a limit
// lowered later is met by the opens that fail. A var for tests.
var fdTableSize = fileio.FDLimit

// readFile is an open file a warm-up reads.
type readFile = fileio.File

// warm warms up to n bytes of the file at path.
func (w *Warmer) warm(ctx context.Context, path string, n int64, limit uint64) (int64, error) {
	f, n, err := openPrefetched(path, n, limit)
	if err != nil {
		return 0, err
	}
	return readPrefix(ctx, f, n, w.ReadAt)
}

// openPrefetched opens the file at path, if it is a regular file, and
// starts the readahead of its first n bytes (fewer if it shrank), which
// it returns; a full or nearly full fd table is errNoDescriptor. The
// kernel's own readahead is turned off so that exactly the budgeted pages
// are read, except for a file advised whole (nothing lies past its end).
func openPrefetched(path string, n int64, limit uint64) (readFile, int64, error) {
	f, size, err := openWarm(path)
	if fileio.IsFDExhaustion(err) {
		return nil, 0, fmt.Errorf("%w: %w", errNoDescriptor, err)
	}
	if err != nil {
		return nil, 0, err
	}
	if tableNearlyFull(f.Fd(), limit) {
		f.Close()
		return nil, 0, errNoDescriptor
	}
	n = min(n, size)
	if n == size && n <= prefetchAhead {
		pagecache.PrefetchRange(int(f.Fd()), 0, n)
	} else {
		pagecache.Prefetch(int(f.Fd()), min(n, prefetchAhead))
	}
	return f, n, nil
}

// prefetchAhead is how far ahead of its reads a large file is advised:
// the kernel reads at most one readahead window of an advice however
// long, so the advice follows the reads (unless they take turns).
const prefetchAhead = 8 << 20

// adviseRange advises the next window of a large file (a var for tests).
var adviseRange = pagecache.PrefetchRange

// batchFileMax is the largest file warmed in a batch, and prefetchBatch
// the most files in one: a worker starts the readahead of a batch's files,
// then waits for them, so that Workers threads keep Workers ×
// prefetchBatch reads in flight.
const (
	batchFileMax  = 128 << 10
	prefetchBatch = 16
)

// batchFile is one file to warm and, once warmed, what it gave.
type batchFile struct {
	path string
	n    int64
	got  int64
	err  error
}

// warmBatch warms small files: it opens each and starts its readahead,
// then reads them with pread, which waits for the readahead to land (not
// through ReadAt: a pread that finds the pages costs one syscall, the
// ring a round trip). A full fd table ends the opens: the files not
// opened get errNoDescriptor. It returns how many files it opened.
func (w *Warmer) warmBatch(ctx, yctx context.Context, batch []batchFile, limit uint64) (opened int) {
	y := yielderFrom(yctx)
	var n int64
	for _, b := range batch {
		n += b.n
	}
	release, held, err := y.wait(ctx, n)
	if err != nil {
		for i := range batch {
			batch[i].err = err
		}
		return 0
	}
	defer release()
	defer y.charge(ctx, held)()
	files := make([]readFile, len(batch))
	for i := range batch {
		f, n, err := openPrefetched(batch[i].path, batch[i].n, limit)
		if errors.Is(err, errNoDescriptor) {
			for j := i; j < len(batch); j++ {
				batch[j].err = err
			}
			break
		}
		files[i], batch[i].n, batch[i].err = f, n, err
		if f != nil {
			opened++
			if w.prefetched != nil {
				w.prefetched(batch[i].path)
			}
		}
	}
	verify := w.verify
	if verify == nil {
		verify = func(ctx context.Context, _ string, f readFile, n int64) (int64, error) {
			return readPrefix(ctx, f, n, nil)
		}
	}
	for i := range batch {
		if files[i] != nil {
			batch[i].got, batch[i].err = verify(ctx, batch[i].path, files[i], batch[i].n)
		}
	}
	return opened
}

// ReadBufferSize is the buffer each worker reads into.
const ReadBufferSize = 1 << 20

var readBufs = sync.Pool{New: func() any { b := make([]byte, ReadBufferSize); return &b }}

// ReaderAt reads len(buf) bytes of the open file fd at off, going on
// after short reads, and stops short only at the end of the file. It
// redoes itself what its own machinery fails (the handler's ring falls
// back to pread): an error is the file's, or ctx's. If ctx ends while the
// read is in the kernel, it may return at once after calling hold, which
// hands the buffer and the file to the reader: the func hold returns gives
// them back when the kernel is done with them.
type ReaderAt func(ctx context.Context, fd int, buf []byte, off int64, hold func() (release func())) (int, error)

// readPrefix reads the first n bytes of f, which leaves them in the page
// cache, and closes f: at once, or when a read that was let go completes.
func readPrefix(ctx context.Context, f readFile, n int64, readAt ReaderAt) (int64, error) {
	bp := readBufs.Get().(*[]byte)
	lent := false
	hold := func() func() {
		lent = true
		return func() {
			f.Close()
			readBufs.Put(bp)
		}
	}
	defer func() {
		if !lent {
			f.Close()
			readBufs.Put(bp)
		}
	}()
	buf := *bp
	y := yielderFrom(ctx)
	var done int64
	advised := min(n, prefetchAhead) // openPrefetched's advice
	for done < n {
		if ctx.Err() != nil {
			return done, ctx.Err()
		}
		chunk := buf[:min(int64(len(buf)), n-done)]
		release, held, err := y.wait(ctx, int64(len(chunk)))
		if err != nil {
			return done, err
		}
		if !held && advised < n {
			end := min(n, done+int64(len(chunk))+prefetchAhead)
			adviseRange(int(f.Fd()), advised, end-advised)
			advised = end
		}
		var m int
		if readAt != nil && !held {
			m, err = readAt(ctx, int(f.Fd()), chunk, done, hold)
			release()
			switch {
			case ctx.Err() != nil:
				return done, ctx.Err()
			case lent:
				// The buffer and the file are the ring's until the read
				// it let go of completes: this file's warm-up ends here.
				return done, err
			}
		} else {
			// A read that takes its turn goes through pread, not the ring,
			// and pays for the copy with this thread's CPU as a batch does:
			// through the ring the kernel's threads would copy, unseen by
			// any clock of this process.
			pay := y.charge(ctx, held)
			m, err = f.ReadAt(chunk, done)
			pay()
			release()
		}
		done += int64(m)
		switch err := pagecache.ShortRead(m, len(chunk), err); {
		case errors.Is(err, pagecache.ErrTruncated):
			return done, nil // the end of the file: a warm-up stops there
		case err != nil:
			return done, err
		}
	}
	return done, nil
}

func roundUp(n int64) int64 { return (n + pageSize - 1) / pageSize * pageSize }

// Expand turns patterns into files under root: "*" is the whole tree, a
// directory is everything below it, and anything else is a glob relative
// to root. A pattern cannot leave root.
func Expand(root string, patterns []string) ([]Target, error) {
	return expand(context.Background(), root, patterns, nil)
}

// Expand expands patterns as the package's Expand does, taking turns with
// the requests as the reads do (Busy): a large tree's stats cost the core
// serving more than its reads. It returns ctx's error if ctx ends first.
func (w *Warmer) Expand(ctx context.Context, root string, patterns []string) ([]Target, error) {
	return expand(ctx, root, patterns, w.newYielder())
}

// walkTurn is how many files a walk stats in one turn.
const walkTurn = 64

// walkTurns paces a walk: it holds the lane and counts the thread's CPU
// for walkTurn files at a time, while requests are served.
type walkTurns struct {
	y     *yielder
	n     int    // files stat'ed so far
	ended func() // pauses, then gives the lane back
}

// next is called before each file's stat.
func (t *walkTurns) next(ctx context.Context) error {
	if t.y == nil {
		return ctx.Err()
	}
	if t.n%walkTurn == 0 {
		t.end()
		if err := ctx.Err(); err != nil {
			return err // no turn after the end: a pause would be for nothing
		}
		release, held, err := t.y.wait(ctx, 0)
		if err != nil {
			return err
		}
		pay := t.y.charge(ctx, held)
		t.ended = func() { pay(); release() }
	}
	t.n++
	return ctx.Err()
}

// end ends the turn in progress, if any.
func (t *walkTurns) end() {
	if t.ended != nil {
		t.ended()
		t.ended = nil
	}
}

func expand(ctx context.Context, root string, patterns []string, y *yielder) ([]Target, error) {
	seen := map[string]bool{}
	var out []Target
	turns := &walkTurns{y: y}
	defer turns.end()
	add := func(p string, info fs.FileInfo) {
		if info.Mode().IsRegular() && !seen[p] {
			seen[p] = true
			out = append(out, Target{Path: p, Size: info.Size()})
		}
	}
	walk := func(dir string) error {
		return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return ctx.Err() // unreadable parts are skipped, not fatal
			}
			if d.Type().IsRegular() {
				if err := turns.next(ctx); err != nil {
					return err
				}
				if info, err := d.Info(); err == nil {
					add(p, info)
				}
			}
			return nil
		})
	}
	for _, pat := range patterns {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if pat == "*" || pat == "/" || pat == "." {
			if err := walk(root); err != nil {
				return nil, err
			}
			continue
		}
		rel := filepath.Clean("/" + filepath.ToSlash(pat))[1:]
		matches, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return nil, err
		}
		sort.Strings(matches)
		for _, m := range matches {
			if !strings.HasPrefix(m, filepath.Clean(root)) {
				continue
			}
			info, err := os.Stat(m)
			if err != nil {
				continue
			}
			if info.IsDir() {
				if walk(m) != nil && ctx.Err() != nil {
					return nil, ctx.Err()
				}
			} else {
				add(m, info)
			}
		}
	}
	return out, nil
}

// Residencies reports every regular file under the paths.
func Residencies(paths []string) ([]Residency, error) {
	var out []Residency
	for _, p := range paths {
		err := filepath.WalkDir(p, func(f string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.Type().IsRegular() {
				return nil
			}
			r, err := FileResidency(f)
			if err != nil {
				return err
			}
			out = append(out, r)
			return nil
		})
		if err != nil {
			return out, err
		}
	}
	return out, nil
}
