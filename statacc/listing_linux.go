//go:build linux && !flashserve_portable

package statacc

import (
	"encoding/binary"
	"hash/maphash"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flashserve/caddy-flash-serve/internal/fileio"
)

// A directory's listing answers "no such file" for every name it does
// not hold, with no system call and no memory per name: a 404 storm of
// distinct names would otherwise cost each a failed open and an entry. A
// watched directory is listed once listAfter names in it were found
// missing. It holds a hash per name, so a collision only sends a missing
// name to the disk, never answers an existing one missing.
//
// It is kept up to date by the directory's watch: a name created or moved
// in joins it; an event on the directory itself, or a mount change,
// drops it with the node. A deleted name stays listed (harmless). It is
// kept only if no event on the directory was handled while it was read,
// read again after revalidate, and dropped by a purge.
//
// Only a plain missing name is answered so: a directory on a local
// filesystem (network ones change without events), not case-insensitive,
// searchable, not reached through a symlink below a confined root, of at
// most maxDirNames names.

const (
	// maxDirNames bounds a listed directory's names, maxListedNames all listings'.
	maxDirNames    = 1 << 14
	maxListedNames = 1 << 18
	// nameMax is NAME_MAX: a longer name is refused (ENAMETOOLONG), not missing.
	nameMax = 255
	// fsCasefoldFL is FS_CASEFOLD_FL (not in x/sys): a case-insensitive directory.
	fsCasefoldFL = 0x40000000
)

// testHookListingRead runs after a directory's names are read.
var testHookListingRead func(dir string)

// dirListing is a listed directory's name hashes and when they were read.
type dirListing struct {
	names    map[uint64]struct{}
	listedAt int64
}

// listState says whether a node may be listed.
type listState uint8

const (
	listNone    listState = iota
	listBusy              // being read by a lookup
	listRefused           // cannot be listed while the node lives
)

// listedMissing reports whether key's path is missing from the fresh
// listing of a directory on its way, all of them watched (so each is the
// directory the path names). It is a negative hit: it holds the
// watcher's lock only for reading, so that 404s answered from listings
// never wait for each other, only for a change of the tree. A listing
// found stale is forgotten under the lock held for writing.
func (w *watcher) listedMissing(key lookupKey, revalidate time.Duration) bool {
	// A path the kernel refuses before it looks (too long, a NUL)
	// is not "no such file".
	if w == nil || !filepath.IsAbs(key.path) || len(key.path) >= unix.PathMax || strings.IndexByte(key.path, 0) >= 0 {
		return false
	}
	w.mu.RLock()
	missing, stale := w.listedMissingLocked(key, revalidate, false)
	w.mu.RUnlock()
	if !stale {
		return missing
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	missing, _ = w.listedMissingLocked(key, revalidate, true)
	return missing
}

// listedMissingLocked is listedMissing with mu held, for writing if
// unlist: otherwise a stale listing on the way stops the walk (stale).
func (w *watcher) listedMissingLocked(key lookupKey, revalidate time.Duration, unlist bool) (missing, stale bool) {
	confined := key.mode != SymlinksFollow
	// Most often the path's own directory is listed: found without a
	// walk from "/". Not for a long path, whose hash costs.
	if slash := strings.LastIndexByte(key.path, '/'); slash > 0 && slash <= 512 {
		if n := w.listedNodes[key.path[:slash]]; n != nil && !(confined && linkBelow(n, key.root)) {
			if missing, known, stale := w.listedLocked(n, key.path[slash+1:], revalidate, unlist); known || stale {
				return missing, stale
			}
		}
	}
	n := w.root
	for rest := strings.Trim(key.path, "/"); n != nil && rest != ""; {
		if n.dropped || n.state != nodeWatched && n.state != nodeBlind {
			return false, false
		}
		if confined && n.link != nil && len(n.path) > len(key.root) {
			return false, false // deny and beneath refuse a link below the root
		}
		var name string
		name, rest, _ = strings.Cut(rest, "/")
		missing, known, stale := w.listedLocked(n, name, revalidate, unlist)
		switch {
		case stale:
			return false, true
		case known && missing:
			return true, false
		case known && len(name) > nameMax:
			return false, false
		}
		n = n.children[name]
	}
	return false, false
}

// listedLocked looks name up in n's listing: known says n has a fresh
// listing, missing that name is not in it (a name over NAME_MAX is
// refused, not missing). A listing read revalidate ago is forgotten if
// unlist (mu held for writing), else reported stale (mu held at least
// for reading).
func (w *watcher) listedLocked(n *dirNode, name string, revalidate time.Duration, unlist bool) (missing, known, stale bool) {
	l := n.listing
	if l == nil || n.dropped {
		return false, false, false
	}
	if nanotime()-l.listedAt >= int64(revalidate) {
		if !unlist {
			return false, false, true
		}
		// Read again after more misses.
		w.unlistLocked(n)
		w.maybeRemoveLocked(n)
		return false, false, false
	}
	if len(name) > nameMax {
		return false, true, false
	}
	if _, ok := l.names[maphash.String(w.nameSeed, name)]; ok {
		return false, true, false
	}
	if !n.used.Load() {
		n.used.Store(true) // its second chance in the LRU, as a hit's
	}
	return true, true, false
}

// linkBelow reports whether n or a directory above it, below root, is a
// symlink's node: deny and beneath refuse such a path.
func linkBelow(n *dirNode, root string) bool {
	for ; n != nil && len(n.path) > len(root); n = n.parent {
		if n.link != nil {
			return true
		}
	}
	return false
}

// listedAsExisting reports whether the first name of dir that has no
// node is in its directory's listing.
func (w *watcher) listedAsExisting(dir string) bool {
	if !filepath.IsAbs(dir) {
		return false
	}
	w.mu.RLock() // it changes nothing
	defer w.mu.RUnlock()
	n := w.root
	for rest := strings.Trim(dir, "/"); n != nil && rest != ""; {
		if n.dropped || n.state != nodeWatched && n.state != nodeBlind {
			return false
		}
		var name string
		name, rest, _ = strings.Cut(rest, "/")
		ch := n.children[name]
		if ch == nil {
			if l := n.listing; l != nil {
				_, ok := l.names[maphash.String(w.nameSeed, name)]
				return ok
			}
			return false
		}
		n = ch
	}
	return false
}

// noteMissing counts a missing path against the watched directory its
// first missing name is in, and lists that directory at listAfter. t's
// leaf, still pinned, saves a walk. The caller holds a slot: the listing
// reads the directory.
func (w *watcher) noteMissing(path string, t watchTicket, listAfter int) {
	if w == nil || !filepath.IsAbs(path) {
		return
	}
	leaf := t.leaf
	w.mu.Lock()
	n := leaf
	if n != nil && n.state == nodeMissing {
		n = n.parent // the first missing name is n's
	}
	if leaf == nil {
		n = w.root
		for rest := strings.Trim(path, "/"); n != nil && rest != ""; {
			if n.dropped || n.state != nodeWatched && n.state != nodeBlind {
				n = nil
				break
			}
			var name string
			name, rest, _ = strings.Cut(rest, "/")
			ch := n.children[name]
			if ch == nil && n.listing != nil {
				// Listed already: the name exists; no help below it.
				n = nil
				break
			}
			if ch == nil || ch.state == nodeMissing {
				break // name is the first missing one, in n
			}
			n = ch
		}
	}
	if n == nil || n.dropped || n.state != nodeWatched || n.link != nil || n.listing != nil || n.list != listNone ||
		!w.countMissLocked(n.path, listAfter) || w.listed >= maxListedNames {
		w.mu.Unlock()
		return
	}
	n.list = listBusy
	n.pins++
	gen, dir, mountGen := n.gen, n.path, w.mountGen
	w.mu.Unlock()

	listedAt := nanotime()
	names, refused := readListing(dir, w.nameSeed)
	if testHookListingRead != nil {
		testHookListingRead(dir)
	}
	w.mu.Lock()
	n.list = listNone
	switch {
	case n.dropped || w.cache.closed.Load():
		// Close's flush forgets the listings under mu: one kept now
		// would outlive it.
	case refused:
		n.list = listRefused
	case names == nil || n.gen != gen || w.listed+len(names) > maxListedNames:
		// Unreadable now, or changed while it was read. Tried again
		// after listAfter more misses.
	case w.mountGen != mountGen || w.mountsUnread.Load():
		// The mount table changed meanwhile: it may list a mount that
		// has gone (mounts_linux.go).
	default:
		n.listing = &dirListing{names: names, listedAt: listedAt}
		w.listed += len(names)
		w.listedNodes[n.path] = n
		w.cache.counts[Listings].Add(1)
	}
	w.unpinLocked(n)
	w.mu.Unlock()
}

// missCounts counts the missing names by a hash of their directory,
// lossily: directories sharing a slot share its count, and the one that
// completes it is listed. Apart from the nodes, which go when no entry
// keeps them.
type missCounts [1 << 12]uint32

// countMissLocked reports whether a miss in dir completes listAfter in
// its slot. Called with mu held.
func (w *watcher) countMissLocked(dir string, listAfter int) bool {
	if w.misses == nil {
		w.misses = new(missCounts)
	}
	c := &w.misses[maphash.String(w.nameSeed, dir)&(uint64(len(w.misses))-1)]
	if *c++; int(*c) < listAfter {
		return false
	}
	*c = 0
	return true
}

// listNameLocked adds a name created in n's listed directory, and drops
// the listing if it grew past maxDirNames (deleted names stay listed).
func (w *watcher) listNameLocked(n *dirNode, name string) {
	l := n.listing
	h := maphash.String(w.nameSeed, name)
	if _, ok := l.names[h]; ok {
		return
	}
	l.names[h] = struct{}{}
	w.listed++
	if len(l.names) > maxDirNames || w.listed > maxListedNames {
		w.unlistLocked(n)
	}
}

// unlistLocked forgets n's listing; removing the node is the caller's.
func (w *watcher) unlistLocked(n *dirNode) {
	if n.listing == nil {
		return
	}
	w.listed -= len(n.listing.names)
	n.listing = nil
	if w.listedNodes[n.path] == n {
		delete(w.listedNodes, n.path)
	}
	w.cache.counts[Listings].Add(-1)
}

// expireListings forgets the listings read revalidate ago, and the
// nodes they alone kept, so that they do not keep their watches.
func (w *watcher) expireListings(revalidate time.Duration) {
	if w == nil {
		return
	}
	w.mu.Lock()
	now := nanotime()
	for _, n := range w.listedNodes {
		if now-n.listing.listedAt >= int64(revalidate) {
			w.unlistLocked(n)
			w.maybeRemoveLocked(n)
		}
	}
	w.mu.Unlock()
}

// unlistAll forgets every listing, for a purge.
func (w *watcher) unlistAll() {
	if w == nil {
		return
	}
	w.mu.Lock()
	for _, n := range w.byID {
		if n.list == listRefused {
			n.list = listNone
		}
	}
	w.misses = nil
	for _, n := range w.listedNodes {
		w.unlistLocked(n)
		w.maybeRemoveLocked(n)
	}
	w.mu.Unlock()
}

// readListing returns the hashes of dir's names, or nil if it cannot
// now; refused: never list it while its node lives.
func readListing(dir string, seed maphash.Seed) (names map[uint64]struct{}, refused bool) {
	fd, err := fileio.OpenFD(dir, unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if err != nil {
		return nil, false // replaced since (its parent's event drops the node), the fd table full, ...
	}
	defer unix.Close(fd)
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil || !localFSType(int64(st.Type)) {
		return nil, true
	}
	if flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS); err == nil && flags&fsCasefoldFL != 0 {
		return nil, true
	}
	if unix.Faccessat(fd, ".", unix.X_OK, unix.AT_EACCESS) != nil {
		return nil, true
	}
	names = make(map[uint64]struct{})
	var flipped []byte // a name with its letters' case flipped, to probe
	buf := make([]byte, 16<<10)
	for {
		got, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, false
		}
		if got <= 0 {
			break
		}
		// linux_dirent64: d_ino, d_off, d_reclen (2), d_type (1), name.
		for off := 0; off+19 <= got; {
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen == 0 || off+reclen > got {
				return nil, false
			}
			name := buf[off+19 : off+reclen]
			off += reclen
			for i, c := range name {
				if c == 0 {
					name = name[:i]
					break
				}
			}
			if string(name) == "." || string(name) == ".." {
				continue
			}
			names[maphash.Bytes(seed, name)] = struct{}{}
			if len(names) > maxDirNames {
				return nil, true
			}
			if flipped == nil {
				flipped = flipCase(name)
			}
		}
	}
	if flipped != nil {
		if _, listed := names[maphash.Bytes(seed, flipped)]; !listed {
			var st unix.Stat_t
			if unix.Fstatat(fd, string(flipped), &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
				return nil, true // found under another case: names are looked up without it
			}
		}
	}
	return names, false
}

func flipCase(name []byte) []byte {
	var out []byte
	for i, c := range name {
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' {
			if out == nil {
				out = append([]byte(nil), name...)
			}
			out[i] = c ^ 0x20
		}
	}
	return out
}
