//go:build linux && !flashserve_portable

package statacc

import (
	"errors"
	"io/fs"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/flashserve/caddy-flash-serve/internal/fileio"
)

// resolveCachedFlag is openat2's RESOLVE_CACHED (Linux 5.12), which
// golang.org/x/sys does not define: the lookup fails with EAGAIN rather
// than read a name or an inode the dentry cache does not hold.
const resolveCachedFlag = 0x20

// noCachedOpens is set once openat2 refused RESOLVE_CACHED (a kernel
// before 5.12, a seccomp filter): every miss then holds a slot.
var noCachedOpens atomic.Bool

// openCached is the cache's open (Cache.open) for a lookup that must not
// wait for a disk. ok is false when the lookup must hold a slot: a name
// not in the dentry cache (EAGAIN), a symlink on the way (it could lead to
// a filesystem whose open blocks), or any answer other than an open file
// or a missing name, which the slot's lookup gives with its own errors.
// The confinement is the slot's (RESOLVE_BENEATH and RESOLVE_NO_MAGICLINKS
// below the root) with RESOLVE_NO_SYMLINKS added, so that what opens here
// is what the slot's lookup would open.
func openCached(key lookupKey) (info fs.FileInfo, f handle, err error, ok bool) {
	if noCachedOpens.Load() {
		return nil, nil, nil, false
	}
	how := unix.OpenHow{
		Flags:   fileio.ReadFlags,
		Resolve: resolveCachedFlag | unix.RESOLVE_NO_SYMLINKS,
	}
	dirFD, name, op := unix.AT_FDCWD, key.path, "open"
	if key.mode != SymlinksFollow {
		rel, inside := relativeTo(key.root, key.path)
		if !inside {
			return nil, nil, nil, false
		}
		// The root may be a link in every mode; its dentries are cached
		// when its descendant's directory is watched.
		rootFD, err := unix.Openat2(unix.AT_FDCWD, key.root, &unix.OpenHow{
			Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveCachedFlag})
		if err != nil {
			noteCachedOpenError(err)
			return nil, nil, nil, false
		}
		defer unix.Close(rootFD)
		dirFD, name, op = rootFD, rel, "openat2"
		how.Resolve |= unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS
	}
	fd, err := unix.Openat2(dirFD, name, &how)
	switch {
	case err == nil:
		// A bare descriptor, as the slot's lookup keeps: os.NewFile would
		// cost an fcntl and an epoll_ctl more.
		f := wrapFD(fd, key.path)
		info, err := statHandle(f)
		if err != nil || !info.Mode().IsRegular() {
			f.Close()
			return info, nil, err, true
		}
		return info, f, nil, true
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
		// A negative dentry: the answer the slot's lookup would give.
		return nil, nil, &fs.PathError{Op: op, Path: key.path, Err: err}, true
	}
	noteCachedOpenError(err)
	return nil, nil, nil, false
}

// noteCachedOpenError turns cached opens off when the kernel does not
// know the flag (EINVAL) or the call (ENOSYS).
func noteCachedOpenError(err error) {
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		noCachedOpens.Store(true)
	}
}

// localFS reports whether dir is on a filesystem whose open of a cached
// dentry does not wait for anything but memory: the local disk and memory
// filesystems. Any other (FUSE, NFS, CIFS, 9p, Ceph...) may ask a server
// or a daemon on open, and so holds a slot for every lookup.
func localFS(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	return localFSType(int64(st.Type)) // int32 on 32-bit Linux
}

// localFSType reports whether statfs's f_type names one of localFS's
// filesystems.
func localFSType(t int64) bool {
	switch uint32(t) {
	case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC, unix.TMPFS_MAGIC,
		unix.OVERLAYFS_SUPER_MAGIC, unix.RAMFS_MAGIC, unix.F2FS_SUPER_MAGIC:
		return true
	}
	return false
}
