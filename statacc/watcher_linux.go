//go:build linux && !flashserve_portable

package statacc

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watcher invalidates entries from inotify events. It watches directories,
// not files, as lighttpd does: one watch covers every entry of a directory,
// including the names that do not exist yet (negative entries).
type watcher struct {
	cache *Cache
	file  *os.File // the inotify descriptor, read through the netpoller
	fd    int
	mu    sync.Mutex
	byWD  map[int32]*watchedDir
	byDir map[string]*watchedDir
	done  chan struct{}
}

type watchedDir struct {
	path string
	wd   int32 // -1: the watch could not be added
	// gen counts the events seen in the directory, so that a worker can
	// tell whether its stat raced with a change.
	gen     atomic.Uint64
	retryAt time.Time // when to try adding a failed watch again
}

const watchMask = unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE | unix.IN_CREATE |
	unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_ONLYDIR

func newWatcher(c *Cache) *watcher {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil // no inotify: entries fall back to the short TTL
	}
	w := &watcher{
		cache: c,
		file:  os.NewFile(uintptr(fd), "inotify"),
		fd:    fd,
		byWD:  make(map[int32]*watchedDir),
		byDir: make(map[string]*watchedDir),
		done:  make(chan struct{}),
	}
	go w.read()
	return w
}

// add makes sure dir is watched and returns its generation, or false if it
// cannot be (the watch limit, a filesystem without inotify).
func (w *watcher) add(dir string) (uint64, bool) {
	if w == nil {
		return 0, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if d, ok := w.byDir[dir]; ok {
		if d.wd >= 0 {
			return d.gen.Load(), true
		}
		if time.Now().Before(d.retryAt) {
			return 0, false
		}
		delete(w.byDir, dir)
		w.cache.M.UnwatchedDirs.Add(-1) // counted again below if it fails again
	}
	wd, err := unix.InotifyAddWatch(w.fd, dir, watchMask)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return 0, false // nothing to watch; the entry is negative anyway
		}
		// ENOSPC: fs.inotify.max_user_watches is reached. Remember the
		// failure for a while rather than retry on every miss.
		w.byDir[dir] = &watchedDir{path: dir, wd: -1, retryAt: time.Now().Add(10 * time.Second)}
		w.cache.M.UnwatchedDirs.Add(1)
		return 0, false
	}
	d, ok := w.byWD[int32(wd)]
	if ok && d.path != dir {
		// The same directory under another name (a hard link or a bind
		// mount): keep one name per watch.
		return 0, false
	}
	if !ok {
		d = &watchedDir{path: dir, wd: int32(wd)}
		w.byWD[int32(wd)] = d
	}
	w.byDir[dir] = d
	return d.gen.Load(), true
}

func (w *watcher) generation(dir string) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if d, ok := w.byDir[dir]; ok {
		return d.gen.Load()
	}
	return ^uint64(0)
}

func (w *watcher) close() {
	if w == nil {
		return
	}
	w.file.Close() // ends read
	<-w.done
}

// read handles events until the descriptor is closed. The descriptor is
// non-blocking, so the read parks on the netpoller instead of a thread.
func (w *watcher) read() {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.file.Read(buf)
		if err != nil {
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			name := strings.TrimRight(string(nameBytes), "\x00")
			off += unix.SizeofInotifyEvent + int(ev.Len)
			w.handle(ev.Wd, ev.Mask, name)
		}
	}
}

func (w *watcher) handle(wd int32, mask uint32, name string) {
	c := w.cache
	if mask&unix.IN_Q_OVERFLOW != 0 {
		// Events were lost: nothing cached can be trusted.
		w.mu.Lock()
		for _, d := range w.byWD {
			d.gen.Add(1)
		}
		w.mu.Unlock()
		c.Flush()
		return
	}
	w.mu.Lock()
	d, ok := w.byWD[wd]
	if ok {
		d.gen.Add(1)
	}
	if ok && mask&(unix.IN_IGNORED|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
		// The directory itself is gone or moved: its watch is no longer
		// about this path.
		if mask&unix.IN_IGNORED != 0 {
			delete(w.byWD, wd)
		}
		if w.byDir[d.path] == d {
			delete(w.byDir, d.path)
		}
	}
	w.mu.Unlock()
	if !ok {
		return
	}
	if name == "" {
		if mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0 {
			c.Invalidate(d.path, true)
			w.forgetBelow(d.path)
		}
		return
	}
	path := filepath.Join(d.path, name)
	isDir := mask&unix.IN_ISDIR != 0
	c.Invalidate(path, isDir)
	if isDir && mask&(unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_MOVED_TO) != 0 {
		w.forgetBelow(path)
	}
}

// forgetBelow drops the watches of a directory tree that was moved or
// deleted: their paths no longer name them, and new misses add fresh ones.
func (w *watcher) forgetBelow(dir string) {
	prefix := dir + string(filepath.Separator)
	w.mu.Lock()
	defer w.mu.Unlock()
	for p, d := range w.byDir {
		if p == dir || strings.HasPrefix(p, prefix) {
			delete(w.byDir, p)
			if d.wd >= 0 {
				delete(w.byWD, d.wd)
				unix.InotifyRmWatch(w.fd, uint32(d.wd))
			}
		}
	}
}
