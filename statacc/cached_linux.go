//go:build linux && !flashserve_portable

package statacc

import (
	"errors"
	"io/fs"
	"strings"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/flashserve/caddy-flash-serve/internal/fileio"
)

// resolveCachedFlag is openat2's RESOLVE_CACHED (Linux 5.12): EAGAIN
// rather than read a name or inode the dentry cache does not hold.
const resolveCachedFlag = 0x20

// noCachedOpens is set once openat2 refused RESOLVE_CACHED (a kernel
// before 5.12, a seccomp filter): every miss then holds a slot.
var noCachedOpens atomic.Bool

// openCached is Cache.open for a lookup that must not wait for a disk.
// ok is false when it must hold a slot: a name not cached (EAGAIN), a
// symlink on the way (it could lead to a filesystem whose open blocks),
// or any answer but an open file or a missing name. The confinement is
// the slot's with RESOLVE_NO_SYMLINKS added. Links in the root's own path
// are followed (their dentries are cached): a confined lookup walks from
// the root, and one that follows links from site's root when the path
// from "/" met a link (a `current` link that releases are swapped under).
func openCached(key lookupKey, site string) (info fs.FileInfo, f fileRef, err error, ok bool) {
	var si statInfo
	f, stated, err, ok := openCachedInto(key, site, &si)
	if stated {
		kept := si // on the heap only when there is something to keep
		info = &kept
	}
	return info, f, err, ok
}

// openCachedInto is openCached that describes the file it opened in si,
// and reports in stated whether it did: a reopen keeps si on its stack.
func openCachedInto(key lookupKey, site string, si *statInfo) (f fileRef, stated bool, err error, ok bool) {
	if noCachedOpens.Load() {
		return fileRef{}, false, nil, false
	}
	if key.mode != SymlinksFollow {
		return openCachedBelow(key, key.root, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_MAGICLINKS, si)
	}
	f, stated, err, ok = openCachedBelow(key, "", 0, si)
	if site != "" && errors.Is(err, errCachedLink) {
		return openCachedBelow(key, site, 0, si)
	}
	return f, stated, err, ok
}

// openSameCached opens m's file as openCached does, for a reopen, and
// returns it only if it is still the file m describes; otherwise nothing
// is open. Its description stays on the stack: compared, not kept.
func openSameCached(m *meta, site string) fileRef {
	var si statInfo
	f, _, err, ok := openCachedInto(lookupKey{path: m.path, root: m.rootPath(), mode: m.symlinks}, site, &si)
	if !ok || err != nil || !f.isOpen() {
		return fileRef{}
	}
	if !m.sameAs(statIdentity(&si.st), si.st.Size, si.ModTime()) {
		// Changed, and its event is not read yet: a miss makes its entry.
		f.close()
		return fileRef{}
	}
	return f
}

// errCachedLink: a link on the way refused a cached open.
var errCachedLink = errors.New("statacc: a link on the way")

// openCachedBelow is openCachedInto from root ("" for "/"), with the
// resolve flags extra. A link on the way gives errCachedLink and ok false.
func openCachedBelow(key lookupKey, root string, extra uint64, si *statInfo) (f fileRef, stated bool, err error, ok bool) {
	how := unix.OpenHow{
		Flags:   fileio.ReadFlags,
		Resolve: resolveCachedFlag | unix.RESOLVE_NO_SYMLINKS | extra,
	}
	dirFD, name, op := unix.AT_FDCWD, key.path, "open"
	if root != "" {
		rel, inside := relativeTo(root, key.path)
		if !inside {
			return fileRef{}, false, nil, false
		}
		// The root may be a link; its dentries are cached.
		rootFD, err := openat2(unix.AT_FDCWD, root, &unix.OpenHow{
			Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveCachedFlag})
		if err != nil {
			noteCachedOpenError(err)
			return fileRef{}, false, nil, false
		}
		defer unix.Close(rootFD)
		dirFD, name, op = rootFD, rel, "openat2"
	}
	fd, err := openat2(dirFD, name, &how)
	switch {
	case err == nil:
		// A bare descriptor, as the slot's lookup keeps.
		f := fdRef(fd)
		if err := statFDInto(fd, key.path, si); err != nil {
			f.close()
			return fileRef{}, false, err, true
		}
		if !si.Mode().IsRegular() {
			f.close()
			return fileRef{}, true, nil, true
		}
		return f, true, nil, true
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
		// A negative dentry: the answer the slot's lookup would give.
		return fileRef{}, false, &fs.PathError{Op: op, Path: key.path, Err: err}, true
	case errors.Is(err, unix.ELOOP):
		return fileRef{}, false, errCachedLink, false
	}
	noteCachedOpenError(err)
	return fileRef{}, false, nil, false
}

// errNulInPath: a path with a NUL, which no system call can be given.
var errNulInPath = errors.New("statacc: a NUL in the path")

// openat2 is unix.Openat2 with the path copied to the stack when it is
// short, so that a reopen allocates nothing for it.
func openat2(dirFD int, path string, how *unix.OpenHow) (int, error) {
	var buf [512]byte
	if strings.IndexByte(path, 0) >= 0 {
		return -1, errNulInPath // not the kernel's EINVAL (noteCachedOpenError)
	}
	if len(path) >= len(buf) {
		return unix.Openat2(dirFD, path, how) // copied to the heap
	}
	copy(buf[:], path) // and buf[len(path)] is the 0 that ends it
	for {
		fd, _, errno := unix.Syscall6(unix.SYS_OPENAT2, uintptr(dirFD), uintptr(unsafe.Pointer(&buf[0])),
			uintptr(unsafe.Pointer(how)), unsafe.Sizeof(*how), 0, 0)
		switch errno {
		case 0:
			return int(fd), nil
		case unix.EINTR:
			continue
		}
		return -1, errno
	}
}

// noteCachedOpenError turns cached opens off when the kernel does not
// know the call (ENOSYS) or the flag (EINVAL, unless the flag works on
// "/": an EINVAL can be the path's, as a name that is not UTF-8 in a
// case-insensitive directory with strict encoding, which a client
// chooses).
func noteCachedOpenError(err error) {
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) && !cachedOpensWork() {
		noCachedOpens.Store(true)
	}
}

// cachedOpensWork reports whether openat2 takes RESOLVE_CACHED here, by
// opening "/", which needs no lookup.
func cachedOpensWork() bool {
	fd, err := openat2(unix.AT_FDCWD, "/", &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveCachedFlag})
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// localFS reports whether dir is on a local disk or memory filesystem,
// whose open of a cached dentry waits for memory only; others (FUSE, NFS,
// CIFS...) may ask a server on open.
func localFS(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	return localFSType(int64(st.Type)) // int32 on 32-bit Linux
}

func localFSType(t int64) bool {
	switch uint32(t) {
	case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC, unix.TMPFS_MAGIC,
		unix.OVERLAYFS_SUPER_MAGIC, unix.RAMFS_MAGIC, unix.F2FS_SUPER_MAGIC:
		return true
	}
	return false
}
