//go:build linux && !flashserve_portable

package statacc

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flashserve/caddy-flash-serve/internal/fileio"
)

// Mounts are invisible to inotify: a bind mount over a file, an image
// mounted over a directory, or an unmount change what a path opens
// without an event. The kernel tells of every change of the process's
// mount table instead: poll on /proc/self/mountinfo wakes (POLLPRI).
//
// One mountWatcher serves the process: a goroutine parked on the
// netpoller, which reads the table on a change, compares it line by line
// with the last one, and tells every cache the mount points that appeared
// or went; each drops what it holds at or below them (mountsChanged).
//
// What is left: a mount that appears and goes again between two reads,
// or comes back with the same ID, device and root, shows no change. From
// the wake to the read the table is unread (mountsChanging): a lookup's
// entry is then trusted for a second, a node installed then is made
// again, a listing read then is not kept. Without inotify every entry is
// trusted for a second at most anyway.

// mountRegistry is the caches that want mount changes, and their watcher.
type mountRegistry struct {
	mu     sync.Mutex
	caches map[*Cache]struct{}
	w      *mountWatcher
	// notifying is held while caches are told: one that leaves waits for it.
	notifying sync.Mutex
}

var mountReg = mountRegistry{caches: make(map[*Cache]struct{})}

// watchMounts tells c of the mount table's changes, from now on.
func watchMounts(c *Cache) {
	r := &mountReg
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w == nil {
		r.w = startMountWatcher(r)
	}
	r.caches[c] = struct{}{}
}

// unwatchMounts ends watchMounts: no change reaches c once it returns.
func unwatchMounts(c *Cache) {
	r := &mountReg
	r.mu.Lock()
	delete(r.caches, c)
	var stop *mountWatcher
	if len(r.caches) == 0 {
		stop, r.w = r.w, nil
	}
	r.mu.Unlock()
	if stop != nil {
		stop.close()
	}
	// A change being told took its list of caches before c left it.
	r.notifying.Lock()
	r.notifying.Unlock()
}

// each calls f for every cache, while none can leave.
func (r *mountRegistry) each(f func(c *Cache)) {
	r.notifying.Lock()
	defer r.notifying.Unlock()
	r.mu.Lock()
	caches := make([]*Cache, 0, len(r.caches))
	for c := range r.caches {
		caches = append(caches, c)
	}
	r.mu.Unlock()
	for _, c := range caches {
		f(c)
	}
}

// changing tells every cache that the table changed and is not read yet.
func (r *mountRegistry) changing() {
	r.each(func(c *Cache) { c.watch.mountsChanging() })
}

// read tells every cache of the mount points that changed since the last read.
func (r *mountRegistry) read(points []string) {
	r.each(func(c *Cache) {
		if c.watch.mountsChanged(points) {
			c.tidyAfterRemovals()
		}
	})
}

// mountWatcher reads /proc/self/mountinfo when the kernel says it changed.
type mountWatcher struct {
	reg  *mountRegistry
	file *os.File
	fd   int
	done chan struct{}
	// buf holds the table read last; table is its content.
	buf, table []byte
	// seen holds the key of each line (mount ID, parent ID, device, root,
	// mount point) and the number of the last read that saw it: a new key is
	// a mount that appeared, a key gone one that went.
	seen  map[string]*uint64
	reads uint64
}

// mountinfoPath is the table read; tests read it too.
const mountinfoPath = "/proc/self/mountinfo"

// startMountWatcher starts watching the table, or returns nil if it cannot.
func startMountWatcher(r *mountRegistry) *mountWatcher {
	// O_NONBLOCK, so that the goroutine waits in the netpoller.
	fd, err := unix.Open(mountinfoPath, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	m := &mountWatcher{reg: r, fd: fd, file: os.NewFile(uintptr(fd), mountinfoPath), done: make(chan struct{}),
		buf: make([]byte, 16<<10), seen: make(map[string]*uint64)}
	rc, err := m.file.SyscallConn()
	if err != nil || m.read() != nil {
		m.file.Close()
		return nil
	}
	m.diff() // the table as it is now: nothing changed yet
	go m.run(rc)
	return m
}

// close stops the watcher and waits for its goroutine.
func (m *mountWatcher) close() {
	if m == nil {
		return
	}
	m.file.Close() // ends run's wait
	<-m.done
}

// run waits for the table to change and tells the caches. The table is
// read after the wait is armed (RawRead clears the readiness, then reads),
// so no change falls between a read and the wait.
func (m *mountWatcher) run(rc syscall.RawConn) {
	defer close(m.done)
	var gap time.Duration
	first := true
	for {
		armed := false
		err := rc.Read(func(uintptr) bool {
			if armed {
				if first {
					// The first wake may be epoll's readiness of a newly registered
					// file: not a change unless the table shows one.
					first = false
					if prev := string(m.table); m.read() == nil && string(m.table) == prev {
						return false
					}
				}
				return true // woken: the table changed
			}
			armed = true
			start := time.Now()
			var points []string
			if m.read() == nil {
				points = m.diff()
			}
			m.reg.read(points)
			// Under a storm of changes, reads are spaced by four times
			// what one took: at most a fifth of a CPU.
			gap = min(4*time.Since(start), 100*time.Millisecond)
			return false
		})
		if err != nil {
			return // closed (or not pollable: nothing to wait for)
		}
		m.reg.changing()
		time.Sleep(gap)
	}
}

// read reads the whole table into buf and sets table.
func (m *mountWatcher) read() error {
	n := 0
	for {
		if n == len(m.buf) {
			m.buf = append(m.buf, make([]byte, len(m.buf))...)
		}
		k, err := fileio.ReadAt(m.fd, m.buf[n:], int64(n))
		n += k
		switch {
		case err == io.EOF:
			m.table = m.buf[:n]
			return nil
		case err != nil:
			return err
		}
	}
}

// diff compares the table just read with the last one and returns the
// mount points of the lines that appeared or went, each once.
func (m *mountWatcher) diff() []string {
	m.reads++
	var points []string
	matched := 0
	for rest := m.table; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		key, point, ok := mountKey(line)
		if !ok {
			continue
		}
		if r := m.seen[string(key)]; r != nil {
			if *r != m.reads {
				*r = m.reads
				matched++
			}
			continue
		}
		r := m.reads
		m.seen[string(key)] = &r
		if m.reads > 1 {
			points = append(points, unescapeMountPoint(point))
		}
	}
	if matched+len(points) < len(m.seen) {
		for key, r := range m.seen {
			if *r != m.reads {
				delete(m.seen, key)
				if _, point, ok := mountKey([]byte(key)); ok {
					points = append(points, unescapeMountPoint(point))
				}
			}
		}
	}
	return dedupe(points)
}

// mountKey cuts a mountinfo line to its first five fields (mount ID,
// parent ID, major:minor, root, mount point) and returns the fifth,
// escaped.
func mountKey(line []byte) (key, point []byte, ok bool) {
	end := 0
	for field := 0; field < 5; field++ {
		if field > 0 {
			if end >= len(line) || line[end] != ' ' {
				return nil, nil, false
			}
			end++
		}
		start := end
		for end < len(line) && line[end] != ' ' {
			end++
		}
		if end == start {
			return nil, nil, false
		}
		point = line[start:end]
	}
	return line[:end], point, true
}

// unescapeMountPoint undoes the kernel's octal escapes of space, tab,
// newline and backslash.
func unescapeMountPoint(p []byte) string {
	if bytes.IndexByte(p, '\\') < 0 {
		return string(p)
	}
	out := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == '\\' && i+3 < len(p) && isOctal(p[i+1]) && isOctal(p[i+2]) && isOctal(p[i+3]) {
			out = append(out, (p[i+1]-'0')<<6|(p[i+2]-'0')<<3|(p[i+3]-'0'))
			i += 3
			continue
		}
		out = append(out, p[i])
	}
	return string(out)
}

func isOctal(b byte) bool { return b >= '0' && b <= '7' }

// dedupe removes repeated points (a mount moved, or one replaced at the
// same place, shows as one that went and one that appeared).
func dedupe(points []string) []string {
	if len(points) < 2 {
		return points
	}
	seen := make(map[string]struct{}, len(points))
	out := points[:0]
	for _, p := range points {
		if _, ok := seen[p]; !ok {
			seen[p] = struct{}{}
			out = append(out, p)
		}
	}
	return out
}

// mountsChanging records that the table changed and is not read yet:
// what a lookup finds meanwhile may be a mount gone before the read, so
// its entry is trusted for a second and new nodes are made again.
func (w *watcher) mountsChanging() {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.mountGen++
	w.mountsUnread.Store(true)
	w.mu.Unlock()
}

// mountsPending reports whether the mount table changed and is not read
// yet (mountsChanging).
func (w *watcher) mountsPending() bool { return w != nil && w.mountsUnread.Load() }

// mountsChanged ends, as inotify events would, what mounts appearing or
// going at points may have changed: the nodes at or below each point,
// with their entries and the links through them, and the entries of each
// point's name in its parent (a file bind mount). Nodes are found by real
// path, so a point reached through a symlink is found too. It reports
// whether anything was dropped.
func (w *watcher) mountsChanged(points []string) bool {
	if w == nil {
		return false
	}
	type nameEvent struct {
		wd   int32
		name string
	}
	var gone []*meta
	var events []nameEvent
	w.mu.Lock()
	invalidated := w.cache.counts[Invalidations].Load()
	// A read that follows no change (the first) changes nothing:
	// bumping the generation would restart every install in flight.
	if len(points) > 0 || w.mountsUnread.Load() {
		w.mountGen++
	}
	w.mountsUnread.Store(false)
	for _, p := range points {
		if !filepath.IsAbs(p) {
			continue
		}
		p = filepath.Clean(p)
		if p == "/" {
			if w.root != nil {
				w.root.gen++
				w.dropLocked(w.root, &gone)
			}
			continue
		}
		var at []*dirNode
		for n := w.byReal[p]; n != nil; n = n.sameReal {
			at = append(at, n)
		}
		for _, n := range at {
			n.gen++
			w.dropLocked(n, &gone)
		}
		// The point's own name in its parent (a file mounted over a
		// cached file), as an event on the parent's watch names it.
		for n := w.byReal[filepath.Dir(p)]; n != nil; n = n.sameReal {
			if n.wd >= 0 {
				events = append(events, nameEvent{n.wd, filepath.Base(p)})
			}
		}
	}
	w.mu.Unlock()
	w.finish(gone)
	for _, ev := range events {
		w.handle(ev.wd, unix.IN_CREATE, ev.name)
	}
	return w.cache.counts[Invalidations].Load() != invalidated
}

// indexRealLocked enters a node just settled in byReal, by its real path.
func (w *watcher) indexRealLocked(n *dirNode) {
	if n.real == "" {
		return
	}
	if w.byReal == nil {
		w.byReal = make(map[string]*dirNode)
	}
	n.sameReal = w.byReal[n.real]
	w.byReal[n.real] = n
}

// unindexRealLocked takes a node that is dropped out of byReal.
func (w *watcher) unindexRealLocked(n *dirNode) {
	if n.real == "" {
		return
	}
	if head := w.byReal[n.real]; head == n {
		if n.sameReal == nil {
			delete(w.byReal, n.real)
		} else {
			w.byReal[n.real] = n.sameReal
		}
	} else {
		for m := head; m != nil; m = m.sameReal {
			if m.sameReal == n {
				m.sameReal = n.sameReal
				break
			}
		}
	}
	n.sameReal = nil
}
