//go:build linux && !flashserve_portable

package statacc

import (
	"errors"
	"io/fs"
	"sync/atomic"

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
	if noCachedOpens.Load() {
		return nil, fileRef{}, nil, false
	}
	if key.mode != SymlinksFollow {
		return openCachedBelow(key, key.root, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_MAGICLINKS)
	}
	info, f, err, ok = openCachedBelow(key, "", 0)
	if site != "" && errors.Is(err, errCachedLink) {
		return openCachedBelow(key, site, 0)
	}
	return info, f, err, ok
}

// errCachedLink: a link on the way refused a cached open.
var errCachedLink = errors.New("statacc: a link on the way")

// openCachedBelow is openCached from root ("" for "/"), with the resolve
// flags extra. A link on the way gives errCachedLink and ok false.
func openCachedBelow(key lookupKey, root string, extra uint64) (info fs.FileInfo, f fileRef, err error, ok bool) {
	how := unix.OpenHow{
		Flags:   fileio.ReadFlags,
		Resolve: resolveCachedFlag | unix.RESOLVE_NO_SYMLINKS | extra,
	}
	dirFD, name, op := unix.AT_FDCWD, key.path, "open"
	if root != "" {
		rel, inside := relativeTo(root, key.path)
		if !inside {
			return nil, fileRef{}, nil, false
		}
		// The root may be a link; its dentries are cached.
		rootFD, err := unix.Openat2(unix.AT_FDCWD, root, &unix.OpenHow{
			Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveCachedFlag})
		if err != nil {
			noteCachedOpenError(err)
			return nil, fileRef{}, nil, false
		}
		defer unix.Close(rootFD)
		dirFD, name, op = rootFD, rel, "openat2"
	}
	fd, err := unix.Openat2(dirFD, name, &how)
	switch {
	case err == nil:
		// A bare descriptor, as the slot's lookup keeps.
		f := fdRef(fd)
		info, err := f.stat(key.path)
		if err != nil || !info.Mode().IsRegular() {
			f.close()
			return info, fileRef{}, err, true
		}
		return info, f, nil, true
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
		// A negative dentry: the answer the slot's lookup would give.
		return nil, fileRef{}, &fs.PathError{Op: op, Path: key.path, Err: err}, true
	case errors.Is(err, unix.ELOOP):
		return nil, fileRef{}, errCachedLink, false
	}
	noteCachedOpenError(err)
	return nil, fileRef{}, nil, false
}

// noteCachedOpenError turns cached opens off when the kernel does not
// know the flag (EINVAL) or the call (ENOSYS).
func noteCachedOpenError(err error) {
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		noCachedOpens.Store(true)
	}
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
