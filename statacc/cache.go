package statacc

import (
	"context"
	"errors"
	"hash/maphash"
	"io"
	"io/fs"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/flashserve/caddy-flash-serve/internal/fileio"
	"github.com/flashserve/caddy-flash-serve/internal/hotset"
	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// Options configure a Cache. Zero values take the defaults.
type Options struct {
	// Workers is the number of goroutines that do the blocking stat and
	// open calls, and so the most threads the cache holds in the filesystem.
	// Default: 32, or 4 per GOMAXPROCS if more.
	Workers int
	// queueLength bounds the misses waiting for a worker. Default: 256 per worker.
	queueLength int
	// Revalidate is the oldest an entry may be before it is stat'ed again,
	// whatever inotify says; entries of unwatched directories live at most a
	// second. Default: 60s.
	Revalidate time.Duration
	// MaxOpenFiles bounds the descriptors the cache keeps open. Default: a
	// quarter of RLIMIT_NOFILE (the rest is for connections), at most 262144.
	MaxOpenFiles int
	// MaxEntries bounds the cached entries of regular files, with or
	// without a descriptor: past MaxOpenFiles, the least recently used keep
	// their validators and headers but not their descriptor, and a hit on
	// one opens the file again in the request (reopen) rather than looking
	// it up. Default: 131072 (some 80 MiB of heap at most), or MaxOpenFiles
	// if more.
	MaxEntries int
	// NegativeEntries bounds the cached "no such file" answers. When full,
	// a path missing for the first time is answered without being kept (a
	// scanner's distinct paths displace nothing); one that missed before
	// replaces the least recently hit. A watched directory with many missing
	// names is listed instead (listing_linux.go). Default: 65536; at most
	// MaxNegativeEntries. A negative value disables negative caching,
	// listings included.
	NegativeEntries int
	// negativeBytes bounds the bytes of the negative entries' paths and roots.
	// Default: 128 per entry of NegativeEntries, 1 MiB at least.
	negativeBytes int64
	// listAfter is how many missing names are looked up in a watched
	// directory before its names are listed; negative lists none. Default: 8.
	listAfter int
	// MemoryBudget is how many bytes of small files are kept in memory.
	// Default: 64 MiB. A negative value disables it.
	MemoryBudget int64
	// MemoryMaxFile is the largest file kept in memory. Default: 16 KiB:
	// most of a site's HTML, CSS, scripts and icons, which then need no
	// descriptor and leave with their headers in one write (the listener
	// wrapper gathers them; memChunk); larger files go out with sendfile,
	// which copies nothing.
	MemoryMaxFile int64
	// NoInotify turns inotify off: every entry is revalidated after
	// Revalidate.
	NoInotify bool
	// MaxWatches bounds the directories the watcher keeps, and so its
	// inotify watches; past it the least recently used leaf directory is
	// forgotten with its entries. Default: a quarter of
	// fs.inotify.max_user_watches, at most 65536.
	MaxWatches int
	// MaxDirEntries bounds the cached entries without a descriptor
	// (directories, other files that are not regular). Default: 10000.
	MaxDirEntries int
}

// ErrQueueFull is returned by GetCounted when the miss queue is full: the caller
// should answer 503 with a Retry-After.
var ErrQueueFull = errors.New("statacc: too many filesystem lookups waiting")

// errRetry: the entry was invalidated between resolution and acquisition.
var errRetry = errors.New("statacc: entry invalidated while acquired")

// defaultWorkers: a cold miss holds its worker for a disk read, so the
// pool is the most metadata reads in flight; 32 is as many as nginx's
// `aio threads` pool has, with threads well under the runtime's limit.
func defaultWorkers() int { return max(32, 4*runtime.GOMAXPROCS(0)) }

// Cache is a process-wide cache of Entries with their open descriptors,
// filled by a bounded pool of workers, invalidated by inotify with a TTL
// as a safety net: an entry is stale until its event is read where inotify
// watches every directory on its way, else for at most Revalidate (a
// second for unwatched directories).
type Cache struct {
	opts    Options
	entries pathMap // the metas of the paths that exist
	// negatives holds the negative entries, pointer-free (negstore.go).
	negatives *negStore
	jobs      chan *call
	// slots bound the lookups in the filesystem, and so its threads, to Workers.
	slots chan struct{}
	// cachedSlots bounds the lookups tried without a slot (resolveCached):
	// they wait for a CPU, not a disk, so GOMAXPROCS of them suffice.
	cachedSlots chan struct{}
	// smallReadsRefused holds the outcome of the last 32 no-wait reads of
	// small files at misses, newest lowest, a bit set for a refused one;
	// smallReadTurn counts the misses that did not ask (smallReadsCold).
	smallReadsRefused atomic.Uint32
	smallReadTurn     atomic.Uint32
	mu                sync.Mutex // guards inflight; taken on the miss path only
	inflight          map[lookupKey]*call
	watch             *watcher
	// fds, files and negs are the eviction clocks of descriptors, of
	// regular files' entries and of negative entries.
	fds   clock[*Entry]
	files clock[*meta]
	negs  clock[negRef]
	// doors is nil until the negative cache was first full (negative.go).
	doors  atomic.Pointer[doorkeeper]
	counts counters
	stop   chan struct{}
	wg     sync.WaitGroup
	closed atomic.Bool
	// sawUnwatched is set once a descriptor is cached that no inotify event
	// may end: the janitor then walks every second.
	sawUnwatched atomic.Bool
	// idleArmed is set while the cache holds descriptors on another mount
	// than their site's root: the janitor then closes the idle ones.
	idleArmed   atomic.Bool
	janitorWake chan struct{}
	// deadData counts the bytes of memory_cache data of the entries
	// dropped since the clocks were last compacted: a dropped entry is a
	// husk on them until then, which keeps its data alive though the budget
	// no longer counts it. Past an eighth of the budget, the janitor
	// compacts them (compactWanted).
	deadData      atomic.Int64
	compactWanted atomic.Bool
	// otherMountFiles counts those descriptors; rootMounts caches each
	// site root's mount (rootMount).
	otherMountFiles atomic.Int64
	rootMounts      sync.Map // root string → rootMount
	rootMountsN     atomic.Int64
	hot             *hotset.Counter
}

// lookupKey is everything that changes a lookup's answer: misses merge
// only when all match, so that sites with other roots or modes never get
// each other's confinement answer.
type lookupKey struct {
	path, root string
	mode       Symlinks
}

// call is one resolution in flight, shared by concurrent misses of a
// lookupKey. It holds a reference to its entry until every waiter has
// taken its own, so that an eviction cannot close the descriptor under them.
type call struct {
	key lookupKey // root is "" and mode follow for unconfined lookups
	// site is the root of the first lookup, with any mode (closeIdle).
	site string
	// done is closed when the result (entry or err) is set; made by the
	// first waiter (doneLocked), so that a miss nobody merges with makes no
	// channel. Guarded by Cache.mu.
	done  chan struct{}
	entry *Entry // nil when err is set
	// err is what the lookup failed with; the meta does not hold one (a
	// negative answer is kept in the negative store, not as a meta).
	err error
	// pending counts the waiters plus the worker; the last to leave drops
	// the call's reference. Incremented under Cache.mu only.
	pending atomic.Int32
}

// doneLocked returns done, making it if need be. Cache.mu held.
func (cl *call) doneLocked() chan struct{} {
	if cl.done == nil {
		cl.done = make(chan struct{})
	}
	return cl.done
}

func (cl *call) leave() {
	if cl.pending.Add(-1) == 0 && cl.entry != nil {
		cl.entry.Release()
	}
}

// New starts a cache and its workers. Close stops them.
func New(o Options) *Cache {
	if o.Workers <= 0 {
		o.Workers = defaultWorkers()
	}
	if o.queueLength <= 0 {
		o.queueLength = 256 * o.Workers
	}
	if o.Revalidate <= 0 {
		o.Revalidate = 60 * time.Second
	}
	if o.MaxOpenFiles <= 0 {
		o.MaxOpenFiles = defaultMaxOpenFiles()
	}
	if o.NegativeEntries == 0 {
		o.NegativeEntries = defaultNegativeEntries
	}
	o.NegativeEntries = min(o.NegativeEntries, MaxNegativeEntries)
	if o.negativeBytes <= 0 {
		o.negativeBytes = max(minNegativeBytes, int64(o.NegativeEntries)*negativeBytesPerEntry)
	}
	if o.listAfter == 0 {
		o.listAfter = defaultListAfter
	}
	if o.NegativeEntries < 0 {
		o.listAfter = -1
	}
	if o.MemoryBudget == 0 {
		o.MemoryBudget = 64 << 20
	}
	if o.MemoryMaxFile <= 0 {
		o.MemoryMaxFile = 16 << 10
	}
	if o.MaxWatches <= 0 {
		o.MaxWatches = defaultMaxWatches()
	}
	if o.MaxDirEntries <= 0 {
		o.MaxDirEntries = 10000
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = 1 << 17
	}
	o.MaxEntries = max(o.MaxEntries, o.MaxOpenFiles)
	c := &Cache{
		opts:        o,
		jobs:        make(chan *call, o.queueLength),
		slots:       make(chan struct{}, o.Workers),
		cachedSlots: make(chan struct{}, runtime.GOMAXPROCS(0)),
		inflight:    make(map[lookupKey]*call),
		stop:        make(chan struct{}),
		janitorWake: make(chan struct{}, 1),
	}
	c.entries.seed = maphash.MakeSeed()
	c.negatives = newNegStore(&c.counts[NegativeEntries], &c.negs.dead)
	c.hot = hotset.NewCounter(c.hotFiles)
	if !o.NoInotify {
		c.watch = newWatcher(c, o.MaxWatches)
	}
	if c.watch != nil {
		// Mount changes end entries through the watcher's nodes.
		watchMounts(c)
	}
	for range o.Workers {
		c.wg.Add(1)
		go c.worker()
	}
	c.wg.Add(1)
	go c.janitor()
	return c
}

// janitor drops entries that are no longer fresh, as nginx's
// open_file_cache drops inactive ones, so that a descriptor on a file
// deleted where inotify cannot see it is closed even if nobody asks for
// its path again. It walks as often as an entry can go stale. While the
// cache holds descriptors on another mount than their site's root, it also
// closes the idle ones (closeIdle): they keep that filesystem busy, and
// `umount` fails with EBUSY.
func (c *Cache) janitor() {
	defer c.wg.Done()
	nextStale := time.Now().Add(c.stalePeriod())
	var nextIdle time.Time // zero while no descriptor is held
	for {
		if nextIdle.IsZero() && c.idleArmed.Load() {
			nextIdle = time.Now().Add(idlePeriod)
		}
		wake := nextStale
		if !nextIdle.IsZero() && nextIdle.Before(wake) {
			wake = nextIdle
		}
		t := time.NewTimer(time.Until(wake))
		select {
		case <-c.stop:
			t.Stop()
			return
		case <-c.janitorWake:
			t.Stop()
			if c.compactWanted.Swap(false) {
				c.compactFileRings()
			}
			if c.sawUnwatched.Load() {
				// Walk a second from now, not after the longer sleep.
				if next := time.Now().Add(c.stalePeriod()); next.Before(nextStale) {
					nextStale = next
				}
			}
			continue
		case <-t.C:
		}
		now := time.Now()
		if !nextIdle.IsZero() && !now.Before(nextIdle) {
			c.closeIdle()
			nextIdle = now.Add(idlePeriod)
			if c.otherMountFiles.Load() <= 0 {
				// Disarmed before looking again: a record that adds one after this
				// look sees the janitor disarmed and wakes it (armIdle).
				c.idleArmed.Store(false)
				if c.otherMountFiles.Load() <= 0 {
					nextIdle = time.Time{}
				} else {
					c.idleArmed.Store(true)
				}
			}
		}
		if !now.Before(nextStale) {
			c.dropStale()
			nextStale = now.Add(c.stalePeriod())
		}
	}
}

// stalePeriod is how often the janitor walks the map for stale entries.
func (c *Cache) stalePeriod() time.Duration {
	period := c.opts.Revalidate / 2
	if c.sawUnwatched.Load() {
		period = min(period, time.Second)
	}
	return max(period, 100*time.Millisecond)
}

func (c *Cache) wakeJanitor() {
	select {
	case c.janitorWake <- struct{}{}:
	default: // a wake is pending already
	}
}

// armIdle makes sure the janitor closes idle descriptors.
func (c *Cache) armIdle() {
	if !c.idleArmed.Load() && c.idleArmed.CompareAndSwap(false, true) {
		c.wakeJanitor()
	}
}

// onOtherMount reports whether info, what a lookup made for site opened,
// is on another mount than site's root (a filesystem mounted below it, or
// reached through a link). Only those are closed once idle: they are what
// a release script unmounts. Closing those on the root's own mount too
// would cost a miss to every file asked for less often than idlePeriod,
// for an unmount that cannot succeed while the site is served.
func (c *Cache) onOtherMount(info fs.FileInfo, site string) bool {
	if site == "" {
		return false
	}
	m := mountOf(info)
	if m == 0 {
		return false
	}
	r := c.rootMount(site)
	return r != 0 && r != m
}

// rootMount is the mount of the directory root, looked up again at most
// once a second (a mount over the root, a swapped link). Past 1,024 roots
// (a root made of the request's host) the cache of them starts over.
func (c *Cache) rootMount(root string) uint64 {
	now := nanotime()
	if v, ok := c.rootMounts.Load(root); ok {
		if rm := v.(rootMount); now-rm.at < int64(time.Second) {
			return rm.mount
		}
	} else if c.rootMountsN.Add(1) > 1024 {
		c.rootMounts.Clear()
		c.rootMountsN.Store(1)
	}
	m := mountOfPath(root)
	c.rootMounts.Store(root, rootMount{mount: m, at: now})
	return m
}

type rootMount struct {
	mount uint64
	at    int64
}

// idlePeriod: a descriptor on another mount is closed 2 to 4 s after its
// last request, so that `umount` succeeds then.
const idlePeriod = 2 * time.Second

// closeIdle closes the descriptors on another mount than their site's
// root that no request used since the previous pass, nor uses now. It walks
// the clock in steps, letting misses in between, and stops if a
// compaction moved the entries (the next pass does the rest).
func (c *Cache) closeIdle() int {
	k := &c.fds
	n := 0
	k.mu.Lock()
	moved := k.compactions
	for i, steps := 0, 0; i < len(k.ring); steps++ {
		if steps%512 == 511 {
			k.mu.Unlock()
			k.mu.Lock()
			if k.compactions != moved {
				break
			}
		}
		e := k.ring[i]
		// A new entry comes with markIdle set (record): it lives through
		// at least one whole period.
		if !e.has(flagOtherMount) || e.shut.Load() || e.refs.Load() > 1 || e.takeMark(markIdle) {
			i++
			continue
		}
		// The entry stays, without its descriptor. Fails if the descriptor
		// was let go of since.
		if c.shut(e) {
			n++
		}
		k.removeAt(i) // the last entry moves to i, and is looked at next
	}
	k.mu.Unlock()
	c.counts[IdleClosed].Add(int64(n))
	c.tidyRings(n > 0, false)
	return n
}

// dropStale forgets every entry that is no longer fresh. Entries in use
// keep their descriptor until their last transfer releases it.
func (c *Cache) dropStale() int {
	n := 0
	c.entries.Range(func(e *meta) bool {
		if !c.fresh(e) && c.entries.CompareAndDelete(e) {
			c.drop(e)
			n++
		}
		return true
	})
	gone := c.negatives.removeWhere(func(_ *negShard, sl *negSlot) bool {
		return !c.freshNegative(sl) && !c.keptForRevalidation(sl)
	})
	c.watch.forgetNegatives(gone)
	c.watch.expireListings(c.opts.Revalidate)
	c.counts[Expired].Add(int64(n + len(gone)))
	c.tidyRings(n > 0, len(gone) > 0)
	return n + len(gone)
}

// tidyAfterRemovals gives back the room of entries the watcher's events
// took one at a time.
func (c *Cache) tidyAfterRemovals() {
	c.negatives.shrink()
	c.tidyRings(true, true)
}

// tidyRings compacts the descriptors' clock and the negative one after
// entries left in bulk, if dead entries are most of them.
func (c *Cache) tidyRings(fds, negs bool) {
	if fds {
		tidy(&c.fds, fdOps{c}, c.opts.MaxOpenFiles)
		tidy(&c.files, fileOps{c}, c.opts.MaxEntries)
	}
	if negs {
		tidy(&c.negs, negOps{c}, c.opts.NegativeEntries)
	}
}

// compactFileRings takes the dropped entries off the clocks of
// descriptors and file entries now, and so lets their data go (deadData).
func (c *Cache) compactFileRings() {
	c.deadData.Store(0)
	c.fds.mu.Lock()
	c.fds.compactLocked(fdOps{c})
	c.fds.mu.Unlock()
	c.files.mu.Lock()
	c.files.compactLocked(fileOps{c})
	c.files.mu.Unlock()
}

// keptForRevalidation reports whether the janitor leaves a stale
// negative entry of a watched directory for its next lookup to revalidate
// in place (revalidateNegative): a path asked for about once per
// Revalidate then costs one failed open, not a new entry.
func (c *Cache) keptForRevalidation(sl *negSlot) bool {
	return sl.watched() && nanotime()-sl.checked.Load() < 2*int64(c.opts.Revalidate)
}

// Options returns the options in force, defaults filled in.
func (c *Cache) Options() Options { return c.opts }

func defaultMaxOpenFiles() int {
	if n := fileio.FDLimit(); n > 0 {
		return max(64, min(1<<18, int(n/4)))
	}
	return 1024
}

// Close stops the workers and the watcher and drops every entry;
// descriptors still in use close when their last user releases them.
// A closed cache still answers lookups, uncached (lookupClosed): a reload
// closes it while the old server's last requests still run.
func (c *Cache) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	if c.watch != nil {
		unwatchMounts(c)
	}
	close(c.stop)
	c.wg.Wait()
	c.refuseQueued()
	if c.watch != nil {
		c.watch.close()
	}
	c.flush()
	return nil
}

// errCacheClosed is what a miss of a closed cache gets; GetCounted
// answers it with lookupClosed.
var errCacheClosed = errors.New("statacc: cache closed")

// lookupClosed answers a lookup of a closed cache as a miss does, in a
// slot, with an entry that nothing caches: its only reference is the
// caller's, whose Release closes the descriptor.
func (c *Cache) lookupClosed(ctx context.Context, key lookupKey) (*Entry, error) {
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	e, _, err := c.load(key, "")
	<-c.slots
	if err != nil {
		return nil, err
	}
	// The caller's alone: the budget does not count its data.
	c.counts[MemoryBytes].Add(-int64(len(e.data)))
	e.root, e.symlinks = interned(key.root), key.mode
	e.refs.Store(1) // the caller's
	return e, nil
}

// refuseQueued answers the misses still queued for the stopped workers
// with errCacheClosed. Close calls it, and so does a miss that queued
// itself and then saw the cache closed: whichever comes second finds it.
func (c *Cache) refuseQueued() {
	for {
		select {
		case cl := <-c.jobs:
			c.complete(cl, nil, errCacheClosed)
			cl.leave()
		default:
			return
		}
	}
}

// GetCounted returns the entry for path, a file below root resolved as
// mode says, with a reference the caller gives back with Release, and
// counts the lookup in counts unless nil. A missing path gives its error
// and no entry. A fresh hit makes no system call and takes no lock; a
// negative hit polls the inotify descriptor (catchUp), takes one shard's
// read lock and allocates nothing. With SymlinksFollow, root only tells
// the site's mount (closeIdle). root and path must be absolute and clean.
func (c *Cache) GetCounted(ctx context.Context, counts *LookupCounts, root string, mode Symlinks, path string) (*Entry, error) {
	site := root
	if mode == SymlinksFollow {
		root = ""
	}
	if m := c.entries.Load(path); m != nil {
		if m.rootPath() == root && m.symlinks == mode && c.fresh(m) {
			e := m.open.Load()
			if e == nil || !e.acquire() {
				e = c.reopen(m, site)
			}
			if e != nil {
				m.markUsed()
				if d := m.dir; d != nil && !d.used.Load() {
					d.used.Store(true) // the directory's second chance
				}
				m.hot.Hit()
				c.counts[Hits].Add(1)
				if counts != nil {
					counts.Hits.Add(1)
				}
				return e, nil
			}
		}
	}
	key := lookupKey{path: path, root: root, mode: mode}
	// Every event queued by now is handled before "no such file" is
	// answered from memory: one may be the path's creation.
	if c.watch.catchUp(ctx) {
		if err, ok := c.negativeHit(key); ok {
			if counts != nil {
				counts.NegativeHits.Add(1)
			}
			return nil, err
		}
		if c.opts.listAfter > 0 && c.watch.listedMissing(key, c.opts.Revalidate) {
			c.counts[NegativeHits].Add(1)
			c.counts[listedMisses].Add(1)
			if counts != nil {
				counts.NegativeHits.Add(1)
			}
			return nil, negErrors[negNotExist]
		}
	}
	if counts != nil {
		counts.Misses.Add(1)
	}
	for range 3 {
		e, err := c.miss(ctx, key, site)
		switch err {
		case errRetry:
			continue
		case errCacheClosed:
			return c.lookupClosed(ctx, key)
		}
		return e, err
	}
	return nil, ErrQueueFull
}

// negativeHit answers a lookup from its negative entry, fresh or
// revalidated in place. It allocates nothing.
func (c *Cache) negativeHit(key lookupKey) (error, bool) {
	s := c.negatives
	h := s.hash(key.path)
	sh, shard := s.shardOf(h)
	sh.mu.RLock()
	sl, i := s.findLocked(sh, h, key.path)
	if sl == nil || sl.symlinks != key.mode || !s.rootIs(sh, sl, key.root) {
		sh.mu.RUnlock()
		return nil, false
	}
	kind, refusedAt := sl.errKind(), sl.refusedAt()
	if c.freshNegative(sl) {
		if !sl.used.Load() {
			sl.used.Store(true) // the eviction clock's mark, written once per sweep
		}
		mark := sl.mark
		sh.mu.RUnlock()
		c.watch.markUsed(mark)
		c.counts[NegativeHits].Add(1)
		return hitError(kind, refusedAt, key.path), true
	}
	ref := makeNegRef(shard, i, sl.gen.Load())
	watched, checked := sl.watched(), sl.checked.Load()
	sh.mu.RUnlock()
	if c.revalidateNegative(key, ref, watched, checked, kind) {
		c.counts[NegativeHits].Add(1)
		return hitError(kind, refusedAt, key.path), true
	}
	return nil, false
}

// revalidateNegative looks the path of a stale negative entry up again,
// in place: if it is still missing the same way, the entry is fresh again.
// A storm of missing paths then costs one failed open per path and
// Revalidate, not a whole miss each when they all expire together. Only
// for a watched directory; false when the path is found, the entry left,
// or no slot is free.
func (c *Cache) revalidateNegative(key lookupKey, ref negRef, watched bool, checked int64, kind negKind) bool {
	// One published stale may be indexed under no node, so that no event
	// would drop it: a miss looks it up with a new ticket.
	if !watched || checked == staleSince {
		return false
	}
	select {
	case c.slots <- struct{}{}:
	default:
		return false
	}
	// The age counts from before the lookup, as a miss's does.
	now := nanotime()
	_, f, _, err := c.open(key)
	<-c.slots
	if f.isOpen() {
		f.close()
	}
	if !sameMissing(err, negErrors[kind]) {
		return false
	}
	// An inotify event that drops the entry meanwhile frees its slot
	// (under the shard's write lock): its gen no longer matches then.
	sh := &c.negatives.shards[ref.shard()]
	sh.mu.RLock()
	sl := sh.refLocked(ref)
	ok := sl != nil
	if ok {
		if old := sl.checked.Load(); old < now {
			sl.checked.CompareAndSwap(old, now)
		}
	}
	sh.mu.RUnlock()
	if ok {
		c.counts[negativeRevalidations].Add(1)
	}
	return ok
}

// sameMissing reports whether err says that a path is missing in the way
// old said it: both fs.ErrNotExist, or both ENOTDIR.
func sameMissing(err, old error) bool {
	if err == nil || old == nil {
		return false
	}
	if errors.Is(old, fs.ErrNotExist) {
		return errors.Is(err, fs.ErrNotExist)
	}
	return errors.Is(old, syscall.ENOTDIR) && errors.Is(err, syscall.ENOTDIR)
}

func (c *Cache) fresh(e *meta) bool { return c.freshSince(e.checked.Load(), e.watched) }

func (c *Cache) freshNegative(sl *negSlot) bool { return c.freshSince(sl.checked.Load(), sl.watched()) }

// freshSince: Revalidate where inotify watches, else at most a second.
func (c *Cache) freshSince(checked int64, watched bool) bool {
	ttl := c.opts.Revalidate
	if !watched {
		ttl = min(ttl, time.Second)
	}
	return nanotime()-checked < int64(ttl)
}

func (c *Cache) miss(ctx context.Context, key lookupKey, site string) (*Entry, error) {
	if c.closed.Load() {
		return nil, errCacheClosed
	}
	c.mu.Lock()
	if cl, ok := c.inflight[key]; ok {
		c.counts[Merged].Add(1)
		cl.pending.Add(1)
		done := cl.doneLocked()
		c.mu.Unlock()
		return c.wait(ctx, cl, done)
	}
	cl := &call{key: key, site: site}
	cl.pending.Store(1) // the resolver's: this goroutine's or a worker's
	c.counts[Misses].Add(1)
	c.inflight[key] = cl
	c.mu.Unlock()
	select {
	case c.slots <- struct{}{}:
		// A slot is free: resolve here, saving two goroutine switches.
		c.finish(cl, true)
		defer cl.leave()
		return c.acquireResult(cl)
	default:
	}
	// Every slot is taken: what the kernel has cached is answered without
	// one, rather than queued behind cold lookups.
	if e, err, ok := c.resolveCached(key, site); ok {
		c.complete(cl, e, err)
		defer cl.leave()
		return c.acquireResult(cl)
	}
	cl.pending.Add(1) // this goroutine's, as a merged waiter's, before the worker can leave
	c.mu.Lock()
	done := cl.doneLocked()
	c.mu.Unlock()
	select {
	case c.jobs <- cl:
		if c.closed.Load() {
			c.refuseQueued() // Close may have drained the queue before this call entered it
		}
		return c.wait(ctx, cl, done)
	default:
		// Misses merged with this one meanwhile are refused with it.
		cl.pending.Add(-1)
		c.counts[QueueFull].Add(1)
		c.complete(cl, nil, ErrQueueFull)
		cl.leave()
		return nil, ErrQueueFull
	}
}

// wait waits for a call resolved by another goroutine, holding one of its
// pending counts, which it gives back; done is the call's (doneLocked).
func (c *Cache) wait(ctx context.Context, cl *call, done <-chan struct{}) (*Entry, error) {
	defer cl.leave()
	start := nanotime()
	select {
	case <-done:
	case <-ctx.Done():
		// The worker finishes the call anyway and caches the answer.
		return nil, ctx.Err()
	}
	c.counts[Wait].Add(nanotime() - start)
	return c.acquireResult(cl)
}

func (c *Cache) acquireResult(cl *call) (*Entry, error) {
	if cl.err != nil {
		return nil, cl.err
	}
	e := cl.entry
	if !e.acquire() {
		return nil, errRetry // cannot happen while the call holds its reference
	}
	e.hot.Hit()
	return e, nil
}

// finish resolves a call while holding a slot. inline: the goroutine
// that missed resolves its own call and leaves it itself.
func (c *Cache) finish(cl *call, inline bool) {
	if !inline {
		c.slots <- struct{}{}
	}
	c.counts[slotLookups].Add(1)
	e, err := c.resolve(cl.key, cl.site)
	<-c.slots
	c.complete(cl, e, err)
	if !inline {
		cl.leave()
	}
}

func (c *Cache) complete(cl *call, e *Entry, err error) {
	cl.entry, cl.err = e, err
	c.mu.Lock()
	delete(c.inflight, cl.key)
	done := cl.done
	c.mu.Unlock()
	if done != nil {
		close(done)
	}
}

func (c *Cache) worker() {
	defer c.wg.Done()
	for {
		select {
		case <-c.stop:
			return
		case cl := <-c.jobs:
			c.finish(cl, false)
		}
	}
}

// resolve looks key up and caches the result: an entry, or the error of
// a failed lookup, which a negative entry keeps.
func (c *Cache) resolve(key lookupKey, site string) (*Entry, error) {
	dir := filepath.Dir(key.path)
	admit := admitAsk
	var ticket watchTicket
	entered := false
	if c.opts.NegativeEntries >= 0 && c.negativesFull(key) {
		// With negative caching off a miss is one open, with no probe.
		admit = admitNo
		if c.keepsNegative(key) {
			admit = admitYes
		} else if ticket, entered = c.watch.enterSettled(dir); !entered {
			// The answer would not be kept, and entering the watcher
			// would make nodes for it: open first.
			if e, err, ok := c.probeMissing(key, dir, site); ok {
				c.noteMissing(key, err, watchTicket{})
				return e, err
			}
		}
	}
	// Watch the way before the stat: a later change is an event.
	if !entered {
		ticket = c.watch.enter(dir)
	}
	c.watch.learnFS(ticket, dir)
	// The age counts from before the stat: what it saw may be that old.
	checked := nanotime()
	e, links, err := c.load(key, site)
	c.noteLinked(e, links)
	c.noteMissing(key, err, ticket)
	return c.record(key, site, ticket, checked, e, err, admit, links != notLinked)
}

// noteMissing lets a directory with many missing names be listed.
func (c *Cache) noteMissing(key lookupKey, err error, t watchTicket) {
	if err != nil && c.opts.listAfter > 0 && errors.Is(err, fs.ErrNotExist) {
		c.watch.noteMissing(key.path, t, c.opts.listAfter)
	}
}

// noteLinked wakes the janitor for a descriptor reached through a
// symlink: its target deleted elsewhere sends no event for the link's
// name. A hard link needs nothing: deleting this name is an event.
func (c *Cache) noteLinked(e *Entry, links linkKind) {
	if links == symLinked && e != nil && e.file.isOpen() {
		c.noteUnwatched()
	}
}

// noteUnwatched makes the janitor walk every second from now on.
func (c *Cache) noteUnwatched() {
	if !c.sawUnwatched.Load() && c.sawUnwatched.CompareAndSwap(false, true) {
		c.wakeJanitor()
	}
}

// resolveCached resolves a miss without waiting for a disk, or returns
// nil: only in a directory watched already (a new watch can block), on a
// filesystem whose cached opens do not block (learnFS), and only if the
// kernel has every name on the way cached (openCached).
func (c *Cache) resolveCached(key lookupKey, site string) (_ *Entry, _ error, ok bool) {
	select {
	case c.cachedSlots <- struct{}{}:
		defer func() { <-c.cachedSlots }()
	default:
		return nil, nil, false
	}
	ticket, ok := c.watch.enterCached(filepath.Dir(key.path))
	if !ok {
		return nil, nil, false
	}
	checked := nanotime()
	info, f, err, ok := openCached(key, site)
	if !ok {
		c.watch.leave(ticket)
		return nil, nil, false
	}
	c.counts[cachedLookups].Add(1)
	// No link is followed here (RESOLVE_NO_SYMLINKS); a hard link may be,
	// and the file may be a mount root.
	linked := unwatchable(key.path, info, false, err) != notLinked
	e, err := c.build(key.path, site, info, f, err, false)
	e, err = c.record(key, site, ticket, checked, e, err, admitAsk, linked)
	return e, err, true
}

// admission says whether record keeps a negative answer: ask
// keepsNegative, or what the caller decided (keepsNegative marks the
// doorkeeper, so it is asked once per miss).
type admission int8

const (
	admitAsk admission = iota
	admitYes
	admitNo
)

// record caches a resolved entry, or the error of a failed lookup (e
// nil), as its ticket allows, and returns it. briefly makes it fresh for
// a second only, though its directory is watched: it was opened before
// the directory was entered (probeMissing), its file can change without
// an event for its name (a link), or the mount table changed and is not
// read yet (mounts_linux.go).
func (c *Cache) record(key lookupKey, site string, ticket watchTicket, checked int64, e *Entry, err error, admit admission, briefly bool) (*Entry, error) {
	path := key.path
	if !briefly && ticket.watched && c.watch.mountsPending() {
		briefly = true
	}
	watched := ticket.watched && !briefly
	if err != nil {
		if !cacheableError(err) || admit == admitNo || admit == admitAsk && !c.keepsNegative(key) {
			c.watch.leave(ticket) // an answer for this request, not for the next one
			return nil, err
		}
		c.publishNegative(key, site, ticket, checked, err, watched)
		return nil, err
	}
	m := e.meta
	m.root, m.symlinks = interned(key.root), key.mode
	m.watched = watched
	m.checked.Store(checked)
	if e.file.isOpen() {
		// As if used now: the idle pass that comes next keeps it.
		m.marks.Store(markIdle)
		m.setFlag(flagReopenInline, m.watched && c.watch.cachedOpens(ticket))
	}
	if !ticket.watched && e.file.isOpen() {
		c.noteUnwatched()
	}
	regular := m.fileMode.IsRegular()
	if !regular {
		// A directory or another file without a descriptor: bounded apart,
		// since no clock sees it.
		if c.counts[dirEntries].Add(1) > int64(c.opts.MaxDirEntries) {
			c.counts[dirEntries].Add(-1)
			c.watch.leave(ticket)
			return e, nil
		}
	} else {
		c.counts[fileEntries].Add(1)
	}
	if e.file.isOpen() {
		e.refs.Store(2) // the meta's own reference and the call's
	}
	if !regular || e.file.isOpen() {
		m.open.Store(e) // a regular file's only with its descriptor
	}
	var old *meta
	var replaced bool
	// publish marks m stale if its directory changed while we looked: the
	// requests that wait for it get it, the next one looks again.
	c.watch.publish(ticket, m, func() (negGone, bool) {
		old, replaced = c.entries.Swap(m)
		return c.negatives.removePath(path) // the path's negative entry, if any
	})
	if replaced {
		c.drop(old)
	}
	if regular {
		ringAdd(&c.files, fileOps{c}, m, c.opts.MaxEntries)
		if c.counts[fileEntries].Load() > int64(c.opts.MaxEntries) {
			c.evictEntries(m)
		}
	}
	if e.file.isOpen() {
		c.addOpen(e)
	}
	if c.closed.Load() && c.unpublish(m) {
		// Close's flush may have gone by: drop it here, or its descriptor
		// stays open (a bare descriptor has no finalizer).
		c.drop(m)
	}
	return e, nil
}

// evictEntries makes room after m overfilled MaxEntries: down to fifteen
// sixteenths, so that the sweep runs once per sixteenth of the entries.
// m stays.
func (c *Cache) evictEntries(m *meta) {
	n := c.opts.MaxEntries
	over := func() bool { return c.counts[fileEntries].Load() > int64(n-max(1, n/16)) }
	sweep(&c.files, fileOps{c}, over, n, true, &c.counts[EntryEvictions], m)
}

// publishNegative caches the negative answer e in place of the path's
// entry, if any, indexed under its directory's node. site is the site's
// root, which the store keeps once for all the site's entries.
func (c *Cache) publishNegative(key lookupKey, site string, t watchTicket, checked int64, err error, watched bool) {
	s := c.negatives
	n := negNew{root: key.root, site: site, path: key.path, symlinks: key.mode, kind: kindOf(err), refusedAt: refusedAtPath(err, key.path), watched: watched, checked: checked}
	h := s.hash(key.path)
	var ref negRef
	var pos *meta
	c.watch.publishNegative(t, func(node uint64, mark int32, stale bool) (negRef, negGone, bool) {
		n.node, n.mark = node, mark
		if stale {
			n.checked = staleSince
		}
		pos = c.entries.LoadAndDelete(key.path)
		sh, shard := s.shardOf(h)
		sh.mu.Lock()
		r, old, replaced := s.insertLocked(sh, shard, h, n)
		sh.mu.Unlock()
		ref = r
		return r, old, replaced
	})
	if pos != nil {
		c.drop(pos)
	}
	if ref == 0 {
		return // not stored (insertLocked): a path too long, or no room in the shard
	}
	ringAdd(&c.negs, negOps{c}, ref, c.opts.NegativeEntries)
	if c.counts[NegativeEntries].Load() > int64(c.opts.NegativeEntries) || s.bytes.Load() > c.opts.negativeBytes {
		c.evictNegatives(ref)
	}
	if c.closed.Load() {
		// As record's: Close's flush may have gone by.
		if g, ok := s.removeRef(ref); ok {
			c.watch.forgetNegative(g)
		}
	}
}

func (c *Cache) unpublish(m *meta) bool { return c.entries.CompareAndDelete(m) }

// load looks key up, making room and trying again if the fd table is full.
func (c *Cache) load(key lookupKey, site string) (e *Entry, links linkKind, _ error) {
	path := key.path
	info, f, links, err := c.open(key)
	if err != nil && fileio.IsFDExhaustion(err) {
		// Make room and try once more, so that a full fd table does not turn
		// into errors: half of what is open now, since the table may be full far
		// below max_open_files.
		c.counts[Shed].Add(1)
		c.evict(int(min(int64(c.opts.MaxOpenFiles), c.counts[OpenFiles].Load()))/2, false)
		info, f, links, err = c.open(key)
	}
	e, err = c.build(path, site, info, f, err, true)
	return e, links, err
}

// build makes the entry of what open found. A small file is kept in
// memory only if the page cache holds it (readSmall); mayBlock says
// whether it may be read from disk where that cannot be told.
func (c *Cache) build(path, site string, info fs.FileInfo, f fileRef, err error, mayBlock bool) (*Entry, error) {
	if err != nil {
		return nil, err
	}
	e := newEntry(path, info)
	if f.isOpen() && !info.Mode().IsRegular() {
		f.close() // only a regular file's entry keeps a descriptor
		f = fileRef{}
	}
	if !f.isOpen() {
		return e, nil
	}
	e.file = f
	fd := f.descriptor()
	e.setFlag(flagTrusted, pagecache.Trusted(fd, info))
	e.setFlag(flagInMemoryFS, e.has(flagNoBlockDev) && pagecache.InMemoryFS(fd, info))
	e.setFlag(flagOtherMount, c.onOtherMount(info, site))
	e.cache = c
	c.countOpen(e)
	if e.size <= c.opts.MemoryMaxFile && c.opts.MemoryBudget > 0 {
		if c.counts[MemoryBytes].Add(e.size) <= c.opts.MemoryBudget {
			bp := smallReads.Get().(*[]byte)
			if int64(cap(*bp)) < e.size {
				*bp = make([]byte, e.size)
			}
			buf := (*bp)[:e.size]
			n, err := c.readSmall(e, buf, mayBlock)
			if int64(n) == e.size && (err == nil || err == io.EOF) {
				e.data = append(make([]byte, 0, e.size), buf...)
			}
			smallReads.Put(bp)
			if e.data == nil {
				// Not in the page cache: sent as a cold body (the ring
				// batches such reads, where a worker here would wait for
				// each), and kept in memory from its next lookup, at most
				// Revalidate later.
				c.counts[MemoryBytes].Add(-e.size)
			}
		} else {
			c.counts[MemoryBytes].Add(-e.size)
		}
	}
	return e, nil
}

// smallReads are the buffers small files are read into before they are
// known to be whole in the page cache: a cold tree's misses, whose reads
// are refused, then make no garbage.
var smallReads = sync.Pool{New: func() any { return new([]byte) }}

// readSmall reads a small file whole for the memory cache: only what the
// page cache holds, never waiting for the disk, except on a filesystem
// that cannot tell what it holds (FUSE) where mayBlock allows it; tmpfs
// and ramfs hold it all.
func (c *Cache) readSmall(e *Entry, data []byte, mayBlock bool) (int, error) {
	if e.has(flagInMemoryFS) {
		return e.file.readAt(data, 0, e.path)
	}
	fd := e.file.descriptor()
	noBlockDev := e.has(flagNoBlockDev)
	cached, known := pagecache.WholeCached(fd, e.size, e.has(flagTrusted))
	if known && !cached && !noBlockDev {
		// Not asked with a no-wait read, which would start readahead
		// here, in the worker, where the request's own read is batched.
		// FUSE and NFS (no block device) go on to the no-wait read, and
		// FUSE to a worker's read.
		return 0, syscall.EAGAIN
	}
	guess := !known && !noBlockDev // only a no-wait read can tell
	if guess && c.smallReadsCold() {
		return 0, syscall.EAGAIN
	}
	n, err := pagecache.ReadNoWait(fd, data, 0)
	if err != nil && !errors.Is(err, syscall.EAGAIN) && mayBlock {
		return e.file.readAt(data, 0, e.path)
	}
	if guess {
		c.noteSmallRead(errors.Is(err, syscall.EAGAIN) || err == nil && int64(n) < e.size)
	}
	return n, err
}

// smallReadsCold reports whether a small file's miss should not ask the
// page cache with a no-wait read, where cachestat cannot tell (a file the
// server neither owns nor may write): while most of the last 32 such
// reads were refused (a cold tree), only one miss in 8 asks, since each
// refused read starts readahead in the worker; the one that asks sees the
// tree warm up.
func (c *Cache) smallReadsCold() bool {
	return bits.OnesCount32(c.smallReadsRefused.Load()) > 16 && c.smallReadTurn.Add(1)%8 != 0
}

// noteSmallRead records whether a no-wait read of a small file at a miss
// was refused.
func (c *Cache) noteSmallRead(refused bool) {
	var bit uint32
	if refused {
		bit = 1
	}
	for {
		old := c.smallReadsRefused.Load()
		if c.smallReadsRefused.CompareAndSwap(old, old<<1|bit) {
			return
		}
	}
}

// countOpen counts a descriptor that e opened.
func (c *Cache) countOpen(e *Entry) {
	c.counts[OpenFiles].Add(1)
	if e.has(flagOtherMount) {
		c.otherMountFiles.Add(1)
	}
}

// open describes key's path and returns it open if it is a regular
// file, confined as its mode says. links tells a file whose changes
// inotify may not see (unwatchable).
func (c *Cache) open(key lookupKey) (info fs.FileInfo, f fileRef, links linkKind, err error) {
	path := key.path
	if key.mode != SymlinksFollow {
		info, f, viaLink, err := openConfinedRegular(key.root, path, key.mode)
		return info, f, unwatchable(path, info, viaLink, err), err
	}
	// Open first and fstat, as nginx does: one path walk, not two. O_NONBLOCK
	// keeps a FIFO from blocking.
	f, viaLink, err := openRegularFile(path)
	if err != nil {
		links = unwatchable(path, nil, viaLink, err)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || fileio.IsFDExhaustion(err) {
			return nil, fileRef{}, links, err
		}
		// Describe what cannot be opened (an unreadable directory, a socket).
		info, serr := os.Stat(path)
		if serr != nil || info.Mode().IsRegular() || unreadableDir(info, err) {
			return nil, fileRef{}, links, err
		}
		return info, fileRef{}, links, nil
	}
	info, err = f.stat(path)
	if err != nil || !info.Mode().IsRegular() {
		f.close()
		return info, fileRef{}, notLinked, err
	}
	return info, f, unwatchable(path, info, viaLink, nil), nil
}

// unwatchable tells an entry that must be trusted for a second only,
// though its directory is watched: a file reached through a link, with
// other names (hard links) or that is a mount root (a file bind mount)
// changes without an event for this name. A directory needs nothing: the
// watcher follows links on the way and watches mount roots.
func unwatchable(path string, info fs.FileInfo, viaLink bool, err error) linkKind {
	switch {
	case err != nil && viaLink:
		return symLinked // a dangling link: its target may appear elsewhere
	case err != nil || info == nil || !info.Mode().IsRegular():
		return notLinked
	case viaLink:
		return symLinked
	case multiplyLinked(info):
		return hardLinked
	case mountRootOf(info, path):
		return mountRooted
	}
	return notLinked
}

// linkKind tells how a file may change without an event for its name.
type linkKind uint8

const (
	notLinked  linkKind = iota
	hardLinked          // a regular file with more than one name
	symLinked           // reached through a link as the last element, or a dangling link
	// a file bind mount (mountRootOf); like a hard link, needs no janitor
	mountRooted
)

// unreadableDir reports whether err refused to open the directory info
// describes for want of read permission: file_server answers 403 for one
// it may search but not read (mode 0711), and so does the lookup.
func unreadableDir(info fs.FileInfo, err error) bool {
	return info.IsDir() && errors.Is(err, fs.ErrPermission)
}

// cacheableError: only errors about the path, not the server's state, are
// cached.
func cacheableError(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || IsRefused(err)
}

// drop lets go of an entry that left the map: of its descriptor, its
// memory and its place in the watcher's index and the clocks.
func (c *Cache) drop(m *meta) {
	m.gone.Store(true)
	c.watch.forget(m)
	if !m.fileMode.IsRegular() {
		c.counts[dirEntries].Add(-1)
		return
	}
	c.files.dead.Add(1)
	c.counts[fileEntries].Add(-1)
	if n := int64(len(m.data)); n != 0 {
		c.counts[MemoryBytes].Add(-n)
		if c.deadData.Add(n) > c.opts.MemoryBudget/8 && !c.compactWanted.Swap(true) {
			c.wakeJanitor() // not here: a sweep may hold a clock's lock
		}
	}
	c.hot.Leave(&m.hot, hotset.File{Path: m.path, Size: m.size})
	if e := m.open.Load(); e != nil {
		c.shut(e)
	}
}

// shut makes e's meta let go of e, its descriptor, which closes once the
// requests that hold it release it; a meta with data keeps an Entry
// without a descriptor instead. It reports false if the meta had let go
// of it already, or if e has no descriptor.
func (c *Cache) shut(e *Entry) bool {
	if !e.file.isOpen() {
		return false // a memory entry's bare Entry: no descriptor
	}
	// A small file kept in memory is served from its data without a
	// descriptor: its hits neither reopen it nor take a descriptor from
	// a file that needs one. Not once it is gone: nothing serves it then.
	var bare *Entry
	if e.data != nil && !e.gone.Load() {
		bare = &Entry{meta: e.meta}
	}
	if !e.meta.open.CompareAndSwap(e, bare) {
		return false
	}
	e.shut.Store(true)
	c.fds.dead.Add(1)
	e.Release()
	return true
}

// reopen opens the file of m, a fresh entry whose descriptor the clock
// closed, and returns it acquired: one openat2 and one fstat in the
// request instead of a lookup, if the kernel has every name on the way
// cached and the file is still the one m describes; site is the lookup's
// (openCached). nil sends the caller to a miss, which looks the path up as
// if it were new.
func (c *Cache) reopen(m *meta, site string) *Entry {
	for {
		if e := m.open.Load(); e != nil {
			if e.acquire() {
				return e
			}
			continue // shut while we looked: open again
		}
		if !m.has(flagReopenInline) || m.gone.Load() || c.closed.Load() {
			return nil
		}
		f := openSameCached(m, site)
		if !f.isOpen() {
			return nil
		}
		e := &Entry{meta: m, file: f}
		e.refs.Store(2) // the meta's and the caller's
		c.countOpen(e)
		if !m.open.CompareAndSwap(nil, e) {
			// Another request opened it first: take that one.
			e.refs.Store(1)
			e.Release()
			continue
		}
		c.counts[Reopens].Add(1)
		if m.gone.Load() {
			// Dropped while we opened: drop's shut may have missed e.
			c.shut(e)
		}
		c.addOpen(e)
		return e
	}
}

// addOpen puts a descriptor newly in the cache under its clock, closing
// the least recently used if there are too many now.
func (c *Cache) addOpen(e *Entry) {
	ringAdd(&c.fds, fdOps{c}, e, c.opts.MaxOpenFiles)
	if e.has(flagOtherMount) {
		c.armIdle()
	}
	if c.counts[OpenFiles].Load() > int64(c.opts.MaxOpenFiles) {
		c.evict(c.opts.MaxOpenFiles*9/10, true)
	}
}

// Purge drops path's entry, and with subtree every entry below it, so
// that the next lookup looks again. It returns how many were dropped.
func (c *Cache) Purge(path string, subtree bool) int {
	prefix := path
	if !strings.HasSuffix(prefix, string(filepath.Separator)) {
		prefix += string(filepath.Separator)
	}
	gone := c.negatives.removeBelow(path, prefix, subtree)
	c.watch.forgetNegatives(gone)
	c.watch.unlistAll()
	n := len(gone)
	if m := c.entries.LoadAndDelete(path); m != nil {
		c.drop(m)
		n++
	}
	if !subtree {
		return n
	}
	c.entries.Range(func(m *meta) bool {
		if strings.HasPrefix(m.path, prefix) && c.entries.CompareAndDelete(m) {
			c.drop(m)
			n++
		}
		return true
	})
	c.tidyRings(n > len(gone), len(gone) > 0)
	return n
}

func (c *Cache) flush() {
	c.counts[Flushes].Add(1)
	gone := c.negatives.removeWhere(func(*negShard, *negSlot) bool { return true })
	c.watch.forgetNegatives(gone)
	c.watch.unlistAll()
	c.entries.Range(func(m *meta) bool {
		if c.entries.CompareAndDelete(m) {
			c.drop(m)
		}
		return true
	})
	c.tidyRings(true, len(gone) > 0)
}

// evict closes cached descriptors by the clock until at most target remain.
func (c *Cache) evict(target int, secondChance bool) {
	over := func() bool { return c.counts[OpenFiles].Load() > int64(target) }
	sweep(&c.fds, fdOps{c}, over, c.opts.MaxOpenFiles, secondChance, &c.counts[Evictions], nil)
}

func (c *Cache) entryCount() int {
	return c.negatives.len() + c.entries.Len()
}

var clockBase = time.Now()

// staleSince is a checked time that is never fresh.
const staleSince = math.MinInt64 / 2

// nanotime is a monotonic clock reading, with no system call on Linux.
func nanotime() int64 { return int64(time.Since(clockBase)) }
