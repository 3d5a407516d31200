// Package prewarm loads files into the page cache within a budget and
// reports how much of a file is resident. It reads back the hot set that
// internal/hotset saved (HotTargets), so that a restarted server warms
// the files asked for most first.
package prewarm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flashserve/caddy-flash-serve/internal/fileio"
	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// pageSize is the unit of residency and of the budget.
var pageSize = int64(os.Getpagesize())

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
	y := w.newYielder()
	if y != nil {
		w.yield.Store(y)
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
	queue := jobs // files put back for a full fd table go first
	// take hands a worker the next files in order: a large file alone, or
	// a batch of up to gate.batchLimit small ones that come in a row.
	take := func(batch []batchFile) []batchFile {
		limit := gate.batchLimit()
		mu.Lock()
		defer mu.Unlock()
		for len(batch) < limit && len(queue) > 0 {
			b := queue[0]
			if b.n > batchFileMax && len(batch) > 0 {
				break
			}
			queue = queue[1:]
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
		queue = append(again, queue...)
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
				if b := &batch[0]; b.n > batchFileMax {
					// A large file alone, read through ReadAt. Its n stays
					// as it was: a file put back is queued with it.
					f, n, err := openPrefetched(b.path, b.n, limit)
					switch {
					case err == nil:
						b.got, b.err = readPrefix(ctx, y, f, n, w.ReadAt)
					case errors.Is(err, errNoDescriptor):
						b.err, opened = err, 0
					default:
						b.err = err
					}
				} else {
					opened = w.warmBatch(ctx, y, batch, limit)
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

// openPrefetched opens the file at path, if it is still a regular file
// (else errSkipped), and starts the readahead of its first n bytes (fewer
// if it shrank), which it returns; a full or nearly full fd table is
// errNoDescriptor. The
// kernel's own readahead is turned off so that exactly the budgeted pages
// are read, except for a file advised whole (nothing lies past its end).
func openPrefetched(path string, n int64, limit uint64) (readFile, int64, error) {
	f, size, err := fileio.OpenRegular(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, fileio.ErrNotRegular):
		return nil, 0, errSkipped
	case fileio.IsFDExhaustion(err):
		return nil, 0, fmt.Errorf("%w: %w", errNoDescriptor, err)
	case err != nil:
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
func (w *Warmer) warmBatch(ctx context.Context, y *yielder, batch []batchFile, limit uint64) (opened int) {
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
			return readPrefix(ctx, nil, f, n, nil) // the batch holds the lane
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
// Each chunk takes its turn with y (nil: none).
func readPrefix(ctx context.Context, y *yielder, f readFile, n int64, readAt ReaderAt) (int64, error) {
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

// tableNearlyFull reports whether a descriptor numbered fd, just opened,
// is in the last eighth of an fd table of limit descriptors (0 for
// unknown): the kernel hands out the lowest free number, so the table is
// then mostly taken, and a warm-up leaves the rest to the server's
// connections and its cache. Holes below make it an underestimate: an
// open that finds the table full is the other signal (fdGate).
func tableNearlyFull(fd uintptr, limit uint64) bool {
	return limit > 0 && uint64(fd)+limit/8 >= limit
}
