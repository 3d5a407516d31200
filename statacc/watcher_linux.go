//go:build linux && !flashserve_portable

package statacc

import (
	"context"
	"errors"
	"hash/maphash"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watcher invalidates entries from inotify events. It watches directories,
// not files, as lighttpd does: one watch covers every entry of a directory,
// names that do not exist yet included.
//
// A path is only as fresh as every directory it is looked up through, so
// the watcher keeps a tree of directory nodes from "/" down to each
// entry's directory, or to the first one on the way that is missing or
// cannot be watched, under which the entries below are indexed. A node
// whose name is a symlink holds the node of its target (resolved through
// watched nodes), and goes with it. An event on a name drops its entries
// and its node's subtree; an event on a directory itself drops everything
// below it. Entries are indexed by node, so no event scans the cache.
// Nodes are bounded by MaxWatches, least recently used leaf first.
//
// Locking: mu guards the tree and is never held across a system call. A
// new node is a placeholder installed by the lookup that made it; an event
// that drops it meanwhile marks it dropped, and the lookup starts again.
// An entry is published under mu after checking that its node saw no
// event since the lookup's stat.
type watcher struct {
	cache *Cache
	file  *os.File // the inotify descriptor, read through the netpoller
	fd    int
	raw   syscall.RawConn // file's, to wait for events without reading them
	// drainTurn (a semaphore of one) is held while events are read and handled.
	drainTurn chan struct{}
	draining  atomic.Bool
	closing   atomic.Bool // set by close before the descriptor closes
	buf       []byte      // events read; guarded by drainTurn
	limit     int         // the most nodes

	// mu guards the tree and what hangs off it. Negative hits answered
	// from a listing hold it only for reading (listedMissing).
	mu   sync.RWMutex
	root *dirNode
	byWD map[int32][]*dirNode // nodes on one watch: one directory reached by several paths
	// dead holds the watches removed lately: a lookup that added one just
	// before its removal must not take it for live.
	dead     map[int32]int64
	deadFIFO []int32
	nodes    int
	lru      dirNode // sentinel of the list of nodes, most recently used first
	done     chan struct{}
	// byID finds a node by the id a negative entry names it by.
	byID   map[uint64]*dirNode
	nextID uint64
	// marks are the LRU second chances negative hits give nodes (-1: none).
	marks     []atomic.Bool
	freeMarks []int32
	// byReal finds the settled nodes by real path, for the mount table's
	// changes (mounts_linux.go); mountGen counts those changes; mountsUnread
	// is set until a changed table is read (ensure starts again meanwhile).
	byReal       map[string]*dirNode
	mountGen     uint64
	mountsUnread atomic.Bool
	// listed is the names all listings hold (maxListedNames bounds it),
	// listedNodes the nodes that hold one, by path; misses counts the
	// missing names by directory; nameSeed hashes names and paths.
	listed      int
	listedNodes map[string]*dirNode
	misses      *missCounts
	nameSeed    maphash.Seed
}

const maxMarks = 1 << 20

// dirNode is one directory on the way to cached entries.
type dirNode struct {
	name     string
	path     string // the path as looked up, through links
	real     string // the path without links, once installed
	parent   *dirNode
	children map[string]*dirNode
	state    nodeState
	wd       int32
	failedAt int64 // nanotime of a failed watch, retried after watchRetry
	// installing is closed when a placeholder's lookup has finished.
	installing chan struct{}
	// link is the node of the directory this node's symlink names;
	// dependents the link nodes whose target this node is.
	link       *dirNode
	dependents map[*dirNode]struct{}
	sameReal   *dirNode
	// entries are the directory's cached entries by name; a missing or failed
	// node also holds those below it (entryKey).
	entries nameIndex
	// negs holds the negRefs of the negative entries indexed under it (a
	// missing or failed node's include those below it), for an event to
	// drop them.
	negs    wordTable
	id      uint64 // the node's number, unique in the watcher's life
	mark    int32  // index of the node's negative-hit mark, -1 if none
	pins    int    // lookups in progress, plus dependents
	gen     uint64 // events on this node's watch
	dropped bool
	// fs says whether opens here may skip the slot (learnFS).
	fs fsVerdict
	// listing holds the hashes of the directory's names (listing_linux.go).
	listing *dirListing
	list    listState
	// used is the LRU's second chance, set by a hit.
	used       atomic.Bool
	prev, next *dirNode
}

type nodeState uint8

const (
	nodePending nodeState = iota // being installed
	nodeWatched                  // watched (and its link, if any, resolved)
	nodeMissing                  // does not exist or is not a directory: its parent sees it appear
	nodeFailed                   // exists but cannot be watched
	// nodeBlind may be searched but not read (mode 0711): inotify refuses
	// it. Its parent sees it renamed or removed; a name missing in it is
	// not watched (pathOK).
	nodeBlind
)

// watchRetry is how long a directory that could not be watched waits
// before another try.
const watchRetry = int64(10 * time.Second)

// testHookWatchAdded runs after a node's watch is registered.
var testHookWatchAdded func(path string)

// maxLinkDepth bounds chains of symlinks, as the kernel's ELOOP does.
const maxLinkDepth = 40

const deadFor = int64(10 * time.Second)

const watchMask = unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE | unix.IN_CREATE |
	unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_ONLYDIR

// defaultMaxWatches is a quarter of the user's inotify watches, at most
// 65536.
func defaultMaxWatches() int {
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_user_watches")
	if err != nil {
		return 8192
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return 8192
	}
	return max(16, min(65536, n/4))
}

func newWatcher(c *Cache, limit int) *watcher {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil // no inotify: entries fall back to the short TTL
	}
	w := &watcher{
		cache:     c,
		file:      os.NewFile(uintptr(fd), "inotify"),
		fd:        fd,
		buf:       make([]byte, 64<<10),
		drainTurn: make(chan struct{}, 1),
		limit:     limit,
		byWD:      make(map[int32][]*dirNode),
		dead:      make(map[int32]int64),
		done:      make(chan struct{}),
		byID:      make(map[uint64]*dirNode),
		marks:     make([]atomic.Bool, min(limit, maxMarks)),
	}
	w.nameSeed, w.listedNodes = maphash.MakeSeed(), make(map[string]*dirNode)
	for i := len(w.marks) - 1; i >= 0; i-- {
		w.freeMarks = append(w.freeMarks, int32(i))
	}
	w.lru.prev, w.lru.next = &w.lru, &w.lru
	raw, err := w.file.SyscallConn()
	if err != nil {
		w.file.Close()
		return nil
	}
	w.raw = raw
	go w.read()
	return w
}

// watchTicket is what a lookup holds between enter and publish.
type watchTicket struct {
	leaf    *dirNode // pinned; nil when unwatched
	gen     uint64
	watched bool
	fsKnown bool // leaf's fs verdict was known at enter
}

// fsVerdict is what a directory's filesystem allows.
type fsVerdict uint8

const (
	fsUnknown     fsVerdict = iota
	fsCachedOpens           // an open of a cached dentry does not block (localFS)
	fsSlotOnly              // every lookup holds a slot (FUSE, NFS, ...)
)

// learnFS records a watched directory's filesystem once, by a lookup
// that holds a slot, since statfs can block.
func (w *watcher) learnFS(t watchTicket, dir string) {
	if w == nil || t.leaf == nil || !t.watched || t.fsKnown {
		return
	}
	v := fsSlotOnly
	if localFS(dir) {
		v = fsCachedOpens
	}
	w.mu.Lock()
	t.leaf.fs = v
	w.mu.Unlock()
}

// cachedOpens reports whether t's directory is on a filesystem whose
// cached opens do not block (learnFS), so that a descriptor its entry lost
// may be opened again in a request (Cache.reopen).
func (w *watcher) cachedOpens(t watchTicket) bool {
	if w == nil || t.leaf == nil || !t.watched {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return t.leaf.fs == fsCachedOpens
}

// enterCached is enter for a lookup that must not block: a ticket only
// if every directory down to dir is watched already, none through a
// symlink, on a filesystem that allows cached opens. It makes no watch
// (inotify_add_watch can block).
func (w *watcher) enterCached(dir string) (watchTicket, bool) {
	if w == nil || !filepath.IsAbs(dir) {
		return watchTicket{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.root
	for rest := strings.Trim(dir, "/"); n != nil && rest != ""; {
		if n.state != nodeWatched && n.state != nodeBlind || n.link != nil || n.dropped {
			return watchTicket{}, false
		}
		var name string
		name, rest, _ = strings.Cut(rest, "/")
		n = n.children[name]
	}
	if n == nil || n.state != nodeWatched || n.link != nil || n.dropped || n.fs != fsCachedOpens || !w.pathOK(n) {
		return watchTicket{}, false
	}
	n.pins++
	w.touchPathLocked(n)
	return watchTicket{leaf: n, gen: n.gen, watched: true, fsKnown: true}, true
}

// enter makes sure every directory from "/" down to dir is watched and
// returns a ticket for publish or leave; unwatched, the entry lives a
// second.
func (w *watcher) enter(dir string) watchTicket {
	if w == nil {
		return watchTicket{}
	}
	if t, ok := w.enterKnown(dir); ok {
		return t
	}
	for range 3 {
		leaf, _, again := w.ensure(dir, nil)
		if again {
			continue
		}
		if leaf == nil {
			break
		}
		w.mu.Lock()
		t := watchTicket{leaf: leaf, gen: leaf.gen, watched: !leaf.dropped && w.pathOK(leaf), fsKnown: fsKnown(leaf)}
		w.mu.Unlock()
		return t
	}
	return watchTicket{}
}

// enterKnown is enter for a directory whose nodes all exist and are
// settled, as on most misses: one walk under mu. It reports false where
// ensure has work to do.
func (w *watcher) enterKnown(dir string) (watchTicket, bool) {
	if !filepath.IsAbs(dir) {
		return watchTicket{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	settled := func(n *dirNode) bool {
		return n != nil && !n.dropped && n.state != nodePending && !w.retryDueLocked(n)
	}
	n := w.root
	for rest := strings.Trim(dir, "/"); settled(n) && rest != "" && n.state != nodeMissing && n.state != nodeFailed; {
		var name string
		name, rest, _ = strings.Cut(rest, "/")
		n = n.children[name]
	}
	if !settled(n) {
		return watchTicket{}, false
	}
	n.pins++
	w.touchPathLocked(n)
	return watchTicket{leaf: n, gen: n.gen, watched: w.pathOK(n), fsKnown: fsKnown(n)}, true
}

// fsKnown reports whether learnFS has nothing to learn of n (a missing
// directory's statfs would fail).
func fsKnown(n *dirNode) bool { return n.fs != fsUnknown || n.state != nodeWatched }

// entryKey is the name an entry of path is indexed by under n: its path
// below n, the base name when n is its directory's node.
func entryKey(n *dirNode, path string) string {
	if p := n.path; len(path) > len(p) && strings.HasPrefix(path, p) {
		if p == "/" {
			return path[1:]
		}
		if path[len(p)] == '/' {
			return path[len(p)+1:]
		}
	}
	return filepath.Base(path)
}

// enterSettled is enterKnown for a lookup that must make no node for a
// directory that may not exist (a negative answer that will not be kept),
// unless a listing shows the next name exists: a client cannot make up
// directories that exist.
func (w *watcher) enterSettled(dir string) (watchTicket, bool) {
	if w == nil {
		return watchTicket{}, true
	}
	if t, ok := w.enterKnown(dir); ok {
		return t, true
	}
	if w.listedAsExisting(dir) {
		return w.enter(dir), true
	}
	return watchTicket{}, false
}

// pathOK reports whether every node from the root to n is watched, or
// down to a missing one (its parent sees it appear), not through a blind
// one (no event tells that a name was made in it).
func (w *watcher) pathOK(n *dirNode) bool {
	if n.state != nodeWatched && n.state != nodeMissing {
		return false
	}
	if n.state == nodeMissing && n.parent != nil && n.parent.state != nodeWatched {
		return false
	}
	for n = n.parent; n != nil; n = n.parent {
		if n.state != nodeWatched && n.state != nodeMissing && n.state != nodeBlind {
			return false
		}
	}
	return true
}

// publish stores e (store puts it in the cache map and takes out the
// path's negative entry) and indexes it under its node, unless the node
// saw an event since enter: then e is stored as stale, so that the waiting
// requests get it and the next one looks again. It gives up the ticket.
func (w *watcher) publish(t watchTicket, e *meta, store func() (negGone, bool)) {
	if w == nil || t.leaf == nil {
		if g, ok := store(); ok {
			w.forgetNegative(g)
		}
		return
	}
	w.mu.Lock()
	n := t.leaf
	if t.watched && (n.dropped || n.gen != t.gen) {
		e.checked.Store(staleSince)
	}
	if !n.dropped {
		// Indexed even when stale or unwatched: an event drops it the same.
		e.dir = n
		name := entryKey(n, e.path)
		// An entry under this name left the cache map already (store swapped
		// it out under mu, or its forget is on its way and leaves e).
		n.entries.put(n, name, e)
	}
	if g, ok := store(); ok {
		w.forgetNegativeLocked(g)
	}
	w.unpinLocked(n)
	w.mu.Unlock()
}

// publishNegative is publish for a negative entry: insert is given the
// node (id and mark; 0 and -1 for none) and whether it is stale. The
// entry is indexed by the negRef insert returns.
func (w *watcher) publishNegative(t watchTicket, insert func(node uint64, mark int32, stale bool) (negRef, negGone, bool)) {
	if w == nil || t.leaf == nil {
		if _, old, replaced := insert(0, -1, false); replaced {
			w.forgetNegative(old)
		}
		return
	}
	w.mu.Lock()
	n := t.leaf
	stale := t.watched && (n.dropped || n.gen != t.gen)
	var node uint64
	mark := int32(-1)
	if !n.dropped {
		node, mark = n.id, n.mark
	}
	ref, old, replaced := insert(node, mark, stale)
	if replaced {
		w.forgetNegativeLocked(old)
	}
	if !n.dropped && ref != 0 {
		n.negs.add(uint64(ref))
	}
	w.unpinLocked(n)
	w.mu.Unlock()
}

func (w *watcher) forgetNegative(g negGone) {
	if w == nil || g.node == 0 {
		return
	}
	w.mu.Lock()
	w.forgetNegativeLocked(g)
	w.mu.Unlock()
}

func (w *watcher) forgetNegatives(gs []negGone) {
	if w == nil || len(gs) == 0 {
		return
	}
	w.mu.Lock()
	for _, g := range gs {
		w.forgetNegativeLocked(g)
	}
	w.mu.Unlock()
}

// forgetNegativeLocked takes g out of its node's index (a later entry
// of the same path has another negRef, and keeps its place), and gives
// back the index's room once it is at most an eighth full.
func (w *watcher) forgetNegativeLocked(g negGone) {
	n := w.byID[g.node]
	if n == nil || n.dropped || !n.negs.remove(uint64(g.ref)) {
		return
	}
	n.negs.shrink()
	w.maybeRemoveLocked(n)
}

func (w *watcher) markUsed(mark int32) {
	if w == nil || mark < 0 {
		return
	}
	if m := &w.marks[mark]; !m.Load() {
		m.Store(true)
	}
}

// dropNegativesLocked takes n's negative entries out of the store.
func (w *watcher) dropNegativesLocked(n *dirNode, gone *[]*meta) {
	for _, r := range n.negs.words {
		if r == 0 {
			continue
		}
		if _, ok := w.cache.negatives.removeRef(negRef(r)); ok && gone != nil {
			w.cache.counts[Invalidations].Add(1)
		}
	}
	n.negs = wordTable{}
}

func (w *watcher) leave(t watchTicket) {
	if w == nil || t.leaf == nil {
		return
	}
	w.mu.Lock()
	w.unpinLocked(t.leaf)
	w.mu.Unlock()
}

// forget unindexes an entry that left the cache.
func (w *watcher) forget(e *meta) {
	if w == nil || e.dir == nil {
		return
	}
	w.mu.Lock()
	if n := e.dir; !n.dropped {
		if name := entryKey(n, e.path); n.entries.get(n, name) == e {
			n.entries.remove(n, name)
		}
		w.maybeRemoveLocked(n)
	}
	w.mu.Unlock()
}

// ensure finds or makes the nodes of path, from the root down, and
// returns the deepest one, pinned: path's own node, or the first one on
// the way that is missing or failed (below is then set). No node is made
// below it: nothing below a missing directory changes before it appears,
// which its parent's watch reports; so a deep path missing near the top
// costs one node, not one per level.
//
// Nodes are installed one level at a time, each once its parent is
// settled. again asks the caller to start over (a node on the way was
// dropped meanwhile). A nil leaf means the path cannot be watched. stack
// holds the link nodes being resolved: meeting one again is a loop.
func (w *watcher) ensure(path string, stack []*dirNode) (leaf *dirNode, below, again bool) {
	if len(stack) > maxLinkDepth || !filepath.IsAbs(path) {
		return nil, false, false
	}
	rest := strings.Trim(path, "/")
	var gone []*meta
	// unlock releases mu and drops what the walk took out.
	unlock := func() {
		w.mu.Unlock()
		w.finish(gone)
		gone = nil
	}
	w.mu.Lock()
	var n *dirNode // the node reached, pinned; nil before the root
	for {
		var next *dirNode
		name := "/"
		if n == nil {
			next = w.root
		} else {
			if rest == "" || n.state == nodeMissing || n.state == nodeFailed {
				break
			}
			name, rest, _ = strings.Cut(rest, "/")
			next = n.children[name]
		}
		if next != nil && w.retryDueLocked(next) {
			w.dropLocked(next, &gone)
			next = nil
		}
		if next == nil {
			// Make room under the bound (n is pinned, so it stays).
			if w.nodes >= w.limit && !w.evictLocked(w.nodes+1-w.limit, &gone) {
				w.cache.counts[WatchRefused].Add(1)
				if n != nil {
					w.unpinLocked(n)
				}
				unlock()
				return nil, false, false
			}
			if n == nil {
				next = w.newNodeLocked(nil, "/", "/")
				w.root = next
			} else {
				// A copy: a node must not keep the whole path.
				name = strings.Clone(name)
				next = w.newNodeLocked(n, name, filepath.Join(n.path, name))
			}
			next.pins++
			if n != nil {
				w.unpinLocked(n) // kept: it has a child now
			}
			n = next
			mountGen := w.mountGen
			unlock()
			again := w.install(n, stack)
			w.mu.Lock()
			if !again && !n.dropped && (w.mountGen != mountGen || w.mountsUnread.Load()) {
				// A mount came or went while n was installed, or the table is
				// not read yet: its watch may be on a covered directory. Make
				// it again.
				w.dropLocked(n, &gone)
				again = true
			}
			if again || n.dropped {
				w.unpinLocked(n)
				unlock()
				return nil, false, true
			}
			continue
		}
		next.pins++
		if n != nil {
			w.unpinLocked(n)
		}
		n = next
		if n.state != nodePending {
			continue
		}
		// Being installed, or by this lookup: a link loop.
		for _, l := range stack {
			if l == n {
				w.unpinLocked(n)
				unlock()
				return nil, false, false
			}
		}
		unlock()
		<-n.installing
		w.mu.Lock()
		if n.dropped {
			w.unpinLocked(n)
			unlock()
			return nil, false, true
		}
	}
	w.touchPathLocked(n)
	unlock()
	return n, rest != "", false
}

func (w *watcher) retryDueLocked(n *dirNode) bool {
	return n.state == nodeFailed && nanotime()-n.failedAt > watchRetry
}

func (w *watcher) newNodeLocked(parent *dirNode, name, path string) *dirNode {
	w.nextID++
	n := &dirNode{name: name, path: path, parent: parent, wd: -1, installing: make(chan struct{}), id: w.nextID, mark: -1}
	w.byID[n.id] = n
	if k := len(w.freeMarks); k > 0 {
		n.mark = w.freeMarks[k-1]
		w.freeMarks = w.freeMarks[:k-1]
		w.marks[n.mark].Store(false)
	}
	if parent != nil {
		if parent.children == nil {
			parent.children = make(map[string]*dirNode)
		}
		parent.children[name] = n
	}
	w.nodes++
	w.cache.counts[WatchedDirs].Store(int64(w.nodes))
	n.prev, n.next = &w.lru, w.lru.next
	n.prev.next, n.next.prev = n, n
	return n
}

// touchPathLocked makes n and its ancestors the most recently used,
// ancestors first, so that the list's tail is a leaf.
func (w *watcher) touchPathLocked(n *dirNode) {
	for ; n != nil; n = n.parent {
		w.touchLocked(n)
	}
}

func (w *watcher) touchLocked(n *dirNode) {
	n.prev.next, n.next.prev = n.next, n.prev
	n.prev, n.next = &w.lru, w.lru.next
	n.prev.next, n.next.prev = n, n
}

// evictLocked forgets up to k unpinned, unused leaves, least recent first.
func (w *watcher) evictLocked(k int, gone *[]*meta) bool {
	for steps := 2 * w.nodes; k > 0 && steps > 0; steps-- {
		n := w.lru.prev
		if n == &w.lru {
			return false
		}
		used := n.used.Swap(false)
		if n.mark >= 0 && w.marks[n.mark].Swap(false) {
			used = true
		}
		if len(n.children) > 0 || n.pins > 0 || used {
			w.touchLocked(n)
			continue
		}
		before := w.nodes
		w.dropLocked(n, gone)
		w.cache.counts[watchEvictions].Add(1)
		k -= before - w.nodes
	}
	return k <= 0
}

// install watches a placeholder node and, if its name is a symlink,
// resolves the target to its own node. Called without mu, n pinned.
//
// The first call looks at the name itself (IN_DONT_FOLLOW), so that one
// system call tells a directory (watched), a missing name (ENOENT) and
// anything else (ENOTDIR: lstat tells a file from a link) apart. The
// parent is watched first, so a later change of the name drops the node.
func (w *watcher) install(n *dirNode, stack []*dirNode) (again bool) {
	defer close(n.installing)
	w.mu.Lock()
	pstate, preal, ppath := nodeWatched, "/", "/"
	if n.parent != nil {
		pstate, preal, ppath = n.parent.state, n.parent.real, n.parent.path
	}
	w.mu.Unlock()
	real := n.path
	if preal != ppath {
		real = filepath.Join(preal, n.name)
	}
	if pstate == nodeMissing || pstate == nodeFailed {
		// Nothing below (ensure makes no such node): the parent decides.
		return w.settle(n, pstate, real, nil)
	}
	err, again := w.watch(n, watchMask|unix.IN_DONT_FOLLOW)
	switch {
	case again:
		return true
	case err == nil:
		return w.settle(n, nodeWatched, real, nil)
	case errors.Is(err, unix.ENOENT):
		return w.settle(n, nodeMissing, real, nil)
	case errors.Is(err, unix.EACCES) && unix.Access(n.path, unix.X_OK) == nil:
		// Searchable but not readable (a link would give ENOTDIR).
		return w.settle(n, nodeBlind, real, nil)
	case !errors.Is(err, unix.ENOTDIR):
		return w.settle(n, nodeFailed, real, nil)
	}
	fi, lerr := os.Lstat(n.path)
	switch {
	case lerr != nil && errors.Is(lerr, unix.ENOENT):
		return w.settle(n, nodeMissing, real, nil) // gone since: its parent saw it
	case lerr != nil:
		return w.settle(n, nodeFailed, real, nil)
	case fi.Mode()&os.ModeSymlink == 0:
		return w.settle(n, nodeMissing, real, nil) // a file: its parent sees it become a directory
	}
	// A symlink: watch what it names, if a directory, before reading it.
	err, again = w.watch(n, watchMask)
	switch {
	case again:
		return true
	case err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR):
		return w.settle(n, nodeFailed, real, nil)
	}
	target, rerr := os.Readlink(n.path)
	if rerr != nil {
		return w.settle(n, nodeFailed, real, nil)
	}
	if !filepath.IsAbs(target) {
		target = filepath.Join(preal, target)
	}
	target = filepath.Clean(target)
	var to *dirNode
	var toBelow bool
	for range 3 {
		t, b, again := w.ensure(target, append(stack[:len(stack):len(stack)], n))
		if !again {
			to, toBelow = t, b
			break
		}
	}
	if to == nil {
		return w.settle(n, nodeFailed, real, nil)
	}
	state := nodeWatched
	if err != nil || toBelow {
		// Dangling, naming a file, or a directory still known as
		// missing: the target's node, or its first missing ancestor's,
		// sees it appear or change.
		state = nodeMissing
	}
	return w.settle(n, state, "", to)
}

// errWatchLost: every watch added was one just removed by another lookup.
var errWatchLost = errors.New("statacc: inotify watch removed while added")

// watch adds and registers n's watch: a later change is an event for n.
// again: n was dropped meanwhile.
func (w *watcher) watch(n *dirNode, mask uint32) (err error, again bool) {
	wd, err := unix.InotifyAddWatch(w.fd, n.path, mask)
	if err != nil {
		return err, false
	}
	w.mu.Lock()
	for try := 0; w.isDeadLocked(int32(wd)); try++ {
		// Added just before another lookup removed it: add again.
		w.mu.Unlock()
		if try == 3 {
			return errWatchLost, false
		}
		if wd, err = unix.InotifyAddWatch(w.fd, n.path, mask); err != nil {
			return err, false
		}
		w.mu.Lock()
	}
	if n.dropped {
		w.rmUnusedLocked(int32(wd))
		w.mu.Unlock()
		return nil, true
	}
	n.wd = int32(wd)
	w.byWD[n.wd] = append(w.byWD[n.wd], n)
	w.cache.counts[Watches].Store(int64(len(w.byWD)))
	w.mu.Unlock()
	if testHookWatchAdded != nil {
		testHookWatchAdded(n.path)
	}
	return nil, false
}

// settle records what install found. to, if set, is the pinned node of a
// symlink's target; its pin passes to the link.
func (w *watcher) settle(n *dirNode, state nodeState, real string, to *dirNode) (again bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n.dropped || to != nil && to.dropped {
		if to != nil {
			w.unpinLocked(to)
		}
		return true
	}
	if to != nil {
		n.link = to
		if to.dependents == nil {
			to.dependents = make(map[*dirNode]struct{})
		}
		to.dependents[n] = struct{}{}
		real = to.real
		if to.state != nodeWatched && to.state != nodeMissing || !w.pathOK(to) {
			state = nodeFailed
		}
	}
	n.state, n.real = state, real
	w.indexRealLocked(n)
	if state == nodeFailed {
		n.failedAt = nanotime()
		w.cache.counts[UnwatchedDirs].Add(1)
	}
	return false
}

func (w *watcher) unpinLocked(n *dirNode) {
	n.pins--
	w.maybeRemoveLocked(n)
}

// maybeRemoveLocked removes n and its ancestors while nothing needs them.
func (w *watcher) maybeRemoveLocked(n *dirNode) {
	for n != nil && !n.dropped && n.pins <= 0 && n.entries.len() == 0 && n.negs.len() == 0 && len(n.children) == 0 && len(n.dependents) == 0 && n.listing == nil {
		parent := n.parent
		w.dropLocked(n, nil)
		n = parent
	}
}

// dropLocked forgets n, its subtree and the links through them, with
// their entries (collected in gone, dropped once mu is released). A watch
// nothing else uses is removed here, under mu, so that a lookup's later
// inotify_add_watch of the directory makes a new watch, not one about to
// go (inotify_rm_watch touches no filesystem).
func (w *watcher) dropLocked(n *dirNode, gone *[]*meta) {
	if n.dropped {
		return
	}
	n.dropped = true
	if n.state == nodeFailed {
		w.cache.counts[UnwatchedDirs].Add(-1)
	}
	for _, ch := range n.children {
		w.dropLocked(ch, gone)
	}
	for d := range n.dependents {
		w.dropLocked(d, gone)
	}
	n.entries.each(func(e *meta) {
		if w.cache.unpublish(e) && gone != nil {
			*gone = append(*gone, e)
		}
	})
	n.entries = nameIndex{}
	w.dropNegativesLocked(n, gone)
	w.unlistLocked(n)
	delete(w.byID, n.id)
	w.unindexRealLocked(n)
	if n.mark >= 0 {
		w.freeMarks = append(w.freeMarks, n.mark)
		n.mark = -1
	}
	if n.parent != nil && n.parent.children[n.name] == n {
		delete(n.parent.children, n.name)
	}
	if w.root == n {
		w.root = nil
	}
	if to := n.link; to != nil {
		n.link = nil
		delete(to.dependents, n)
		w.unpinLocked(to)
	}
	if n.wd >= 0 {
		users := slices.DeleteFunc(w.byWD[n.wd], func(x *dirNode) bool { return x == n })
		if len(users) == 0 {
			delete(w.byWD, n.wd)
			w.markDeadLocked(n.wd)
			unix.InotifyRmWatch(w.fd, uint32(n.wd))
		} else {
			w.byWD[n.wd] = users
		}
		n.wd = -1
		w.cache.counts[Watches].Store(int64(len(w.byWD)))
	}
	n.prev.next, n.next.prev = n.next, n.prev
	n.prev, n.next = nil, nil
	w.nodes--
	w.cache.counts[WatchedDirs].Store(int64(w.nodes))
	if n.parent != nil {
		w.maybeRemoveLocked(n.parent)
	}
}

// rmUnusedLocked removes a watch added for a dropped node, if unused.
func (w *watcher) rmUnusedLocked(wd int32) {
	if len(w.byWD[wd]) == 0 {
		w.markDeadLocked(wd)
		unix.InotifyRmWatch(w.fd, uint32(wd))
	}
}

func (w *watcher) markDeadLocked(wd int32) {
	now := nanotime()
	for len(w.deadFIFO) > 0 {
		old := w.deadFIFO[0]
		if t, ok := w.dead[old]; ok && now-t < deadFor {
			break
		}
		delete(w.dead, old)
		w.deadFIFO = w.deadFIFO[1:]
	}
	if _, ok := w.dead[wd]; !ok {
		w.deadFIFO = append(w.deadFIFO, wd)
	}
	w.dead[wd] = now
}

func (w *watcher) isDeadLocked(wd int32) bool {
	t, ok := w.dead[wd]
	return ok && nanotime()-t < deadFor
}

// finish drops the entries that left the map, once mu is released.
func (w *watcher) finish(gone []*meta) {
	for _, e := range gone {
		w.cache.counts[Invalidations].Add(1)
		w.cache.drop(e)
	}
}

func (w *watcher) close() {
	if w == nil {
		return
	}
	w.closing.Store(true)
	w.file.Close() // ends read
	<-w.done
	// Wait for a lookup handling events (catchUp): none may be handled
	// after the cache's last flush.
	w.drainTurn <- struct{}{}
	<-w.drainTurn
}

// read handles events until the descriptor is closed, parked on the
// netpoller.
func (w *watcher) read() {
	defer close(w.done)
	for {
		// Wait for events without reading them: drain reads them.
		err := w.raw.Read(func(fd uintptr) bool { return eventsQueued(int(fd)) })
		if err != nil || !w.drain() {
			return // closed
		}
	}
}

// drain reads and handles events until there are none; false once closed.
func (w *watcher) drain() bool {
	w.drainTurn <- struct{}{}
	return w.drainHeld()
}

func (w *watcher) drainHeld() bool {
	w.draining.Store(true)
	defer func() {
		w.draining.Store(false)
		<-w.drainTurn
	}()
	for {
		var n int
		var rerr error
		// Control, not Read: the watcher's goroutine may be parked in
		// raw.Read, holding the read lock.
		err := w.raw.Control(func(fd uintptr) {
			for {
				if n, rerr = unix.Read(int(fd), w.buf); rerr != unix.EINTR {
					return
				}
			}
		})
		switch {
		case err != nil:
			return false
		case rerr == unix.EAGAIN:
			return true
		case rerr != nil || n <= 0:
			return false
		}
		w.handleBatch(w.buf[:n])
	}
}

func (w *watcher) handleBatch(buf []byte) {
	invalidated := w.cache.counts[Invalidations].Load()
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
		name := strings.TrimRight(string(nameBytes), "\x00")
		off += unix.SizeofInotifyEvent + int(ev.Len)
		w.handle(ev.Wd, ev.Mask, name)
	}
	if w.cache.counts[Invalidations].Load() != invalidated {
		// Give back what a purge would, once per batch of events.
		w.cache.tidyAfterRemovals()
	}
}

// catchUpWait bounds how long a lookup waits for the events being
// handled before it asks the filesystem instead: short, since the
// filesystem answers in microseconds.
const catchUpWait = 5 * time.Millisecond

// eventsQueued reports whether the kernel holds events on fd (or cannot
// tell). poll, not FIONREAD, which walks the queue under the lock every
// event producer takes.
func eventsQueued(fd int) bool {
	fds := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds[:], 0)
	return err != nil || n > 0
}

// catchUp reports whether every event queued before the call is handled
// when it returns. A lookup calls it before it answers "no such file" from
// memory: a file made just before the request had its event queued, and
// the cache would answer 404 where file_server finds it. Usually one
// poll(2); else the lookup handles the events itself or waits for the
// batch being handled, up to catchUpWait or ctx's end, and reports false
// if not done (the lookup then goes to the filesystem). Count first, then
// drain: an event the count missed was read already.
func (w *watcher) catchUp(ctx context.Context) bool {
	if w == nil {
		return true
	}
	if w.closing.Load() {
		return false // its descriptor's number may be another file's now
	}
	if !eventsQueued(w.fd) && !w.draining.Load() {
		return true
	}
	select {
	case w.drainTurn <- struct{}{}:
	default:
		t := time.NewTimer(catchUpWait)
		defer t.Stop()
		select {
		case w.drainTurn <- struct{}{}:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
	return w.drainHeld()
}

const selfEvents = unix.IN_ATTRIB | unix.IN_MOVE_SELF | unix.IN_DELETE_SELF | unix.IN_IGNORED

func (w *watcher) handle(wd int32, mask uint32, name string) {
	c := w.cache
	var gone []*meta
	if mask&unix.IN_Q_OVERFLOW != 0 {
		// Events were lost: nothing cached can be trusted.
		w.mu.Lock()
		if w.root != nil {
			w.dropLocked(w.root, &gone)
		}
		w.mu.Unlock()
		w.finish(gone)
		c.flush()
		return
	}
	w.mu.Lock()
	if mask&unix.IN_IGNORED != 0 {
		// The kernel removed the watch: nothing to remove any more.
		for _, n := range w.byWD[wd] {
			n.wd = -1
		}
		users := w.byWD[wd]
		delete(w.byWD, wd)
		c.counts[Watches].Store(int64(len(w.byWD)))
		for _, n := range users {
			n.gen++
			w.dropLocked(n, &gone)
		}
		w.mu.Unlock()
		w.finish(gone)
		return
	}
	users := append([]*dirNode(nil), w.byWD[wd]...)
	for _, n := range users {
		n.gen++
		if n.dropped {
			continue
		}
		if name == "" {
			if mask&selfEvents != 0 {
				w.dropLocked(n, &gone)
			}
			continue
		}
		if n.listing != nil && mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
			w.listNameLocked(n, name)
		}
		if ch := n.children[name]; ch != nil {
			w.dropLocked(ch, &gone)
		}
		if e := n.entries.get(n, name); e != nil {
			if c.unpublish(e) {
				gone = append(gone, e)
			}
			n.entries.remove(n, name)
			w.maybeRemoveLocked(n)
		}
		if n.negs.len() > 0 {
			if g, ok := c.negatives.removePath(filepath.Join(n.path, name)); ok {
				c.counts[Invalidations].Add(1)
				w.forgetNegativeLocked(g)
			}
		}
	}
	w.mu.Unlock()
	w.finish(gone)
}
