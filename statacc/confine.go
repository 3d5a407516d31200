package statacc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Symlinks says how a lookup treats symbolic links below the root. The
// root itself may be a link in every mode: it is configuration, not
// request input.
type Symlinks uint8

const (
	// SymlinksFollow follows links wherever they point, as file_server.
	SymlinksFollow Symlinks = iota
	// SymlinksDeny refuses any path with a link below the root.
	SymlinksDeny
	// SymlinksBeneath follows relative links only while they stay below
	// the root; absolute links are refused, as RESOLVE_BENEATH does. On
	// Linux 5.6 and later the kernel enforces it (openat2 with
	// RESOLVE_BENEATH), so no race can leave the root; elsewhere an lstat
	// walk checks each element before the open, which a link swapped in
	// between can defeat.
	SymlinksBeneath
)

// ParseSymlinks reads the symlinks option.
func ParseSymlinks(s string) (Symlinks, error) {
	switch s {
	case "", "follow":
		return SymlinksFollow, nil
	case "deny":
		return SymlinksDeny, nil
	case "beneath":
		return SymlinksBeneath, nil
	}
	return 0, fmt.Errorf("symlinks: unknown mode %q; want follow, deny or beneath", s)
}

// String returns the mode as the symlinks option spells it.
func (s Symlinks) String() string {
	return [...]string{"follow", "deny", "beneath"}[s]
}

// Confinement refusals. Both are fs.ErrPermission, which a server
// answers with 403, as nginx's disable_symlinks does.
var (
	errSymlink = fmt.Errorf("%w: a symbolic link on the path (symlinks deny)", fs.ErrPermission)
	errEscape  = fmt.Errorf("%w: the path leaves the root (symlinks beneath)", fs.ErrPermission)
)

// relativeTo returns path relative to root, or false when path is not
// below root.
func relativeTo(root, path string) (string, bool) {
	root = filepath.Clean(root)
	path = filepath.Clean(path)
	if path == root {
		return ".", true
	}
	prefix := root
	if !strings.HasSuffix(prefix, string(filepath.Separator)) {
		prefix += string(filepath.Separator)
	}
	rel, ok := strings.CutPrefix(path, prefix)
	if !ok {
		return "", false
	}
	return rel, true
}

// walkConfined checks each element of path below root with lstat before
// the path is used: the portable confinement, racy by nature because the
// tree can change between the check and the open. lastIsLink reports that
// path's last element is a link: one the walk found allowed, or, with an
// error, one whose target is missing, loops or leaves the root.
func walkConfined(root, path string, mode Symlinks) (lastIsLink bool, err error) {
	rel, ok := relativeTo(root, path)
	if !ok {
		return false, errEscape
	}
	if rel == "." {
		return false, nil
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return false, err
	}
	cur := filepath.Clean(root)
	elems := strings.Split(rel, string(filepath.Separator))
	for i, elem := range elems {
		last := i == len(elems)-1
		cur = filepath.Join(cur, elem)
		fi, err := os.Lstat(cur)
		if err != nil {
			return false, err
		}
		lastIsLink = fi.Mode()&fs.ModeSymlink != 0
		if !lastIsLink {
			continue
		}
		if mode == SymlinksDeny {
			return false, errSymlink
		}
		// As openat2's RESOLVE_BENEATH does, refuse absolute links even
		// when they point inside the root.
		link, err := os.Readlink(cur)
		if err != nil {
			return false, err
		}
		if filepath.IsAbs(link) || climbsOut(realRoot, filepath.Dir(cur), link) {
			return last, errEscape
		}
		target, err := filepath.EvalSymlinks(cur)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && missingOutside(realRoot, filepath.Join(filepath.Dir(cur), link)) {
				// A missing target through a link that leaves: the
				// kernel refuses the step out before it looks for it.
				return last, errEscape
			}
			if _, ok := err.(*fs.PathError); !ok {
				// EvalSymlinks says "too many links" without an errno.
				err = &fs.PathError{Op: "evalsymlinks", Path: cur, Err: syscall.ELOOP}
			}
			// A dangling or looping link as the last element is still a
			// link: its target may appear with no event for its name.
			return last, err
		}
		if _, ok := relativeTo(realRoot, target); !ok {
			// So is one that leaves the root: a directory link on its way
			// may be turned back inside with no event for its name.
			return last, errEscape
		}
	}
	return lastIsLink, nil
}

// climbsOut reports whether a relative link's own text, read from the
// directory the link is in (dir, resolved), climbs above realRoot at some
// step: RESOLVE_BENEATH refuses such a link even when it ends inside the
// root (`../root/a.txt`), and even when its target is missing (a 403, not
// a 404). Links met inside the text are not followed here: where they
// lead is checked by the target's resolution, where it ends.
func climbsOut(realRoot, dir, link string) bool {
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false // the target's resolution reports it
	}
	rel, ok := relativeTo(realRoot, resolved)
	if !ok {
		return true
	}
	depth := 0
	if rel != "." {
		depth = len(strings.Split(rel, string(filepath.Separator)))
	}
	for _, c := range strings.Split(filepath.ToSlash(link), "/") {
		switch c {
		case "", ".":
		case "..":
			if depth--; depth < 0 {
				return true
			}
		default:
			depth++
		}
	}
	return false
}

// missingOutside reports whether a missing target's nearest ancestor that
// exists resolves outside realRoot: the missing name is then behind a
// link that leaves the root.
func missingOutside(realRoot, target string) bool {
	for dir := filepath.Dir(target); ; dir = filepath.Dir(dir) {
		if resolved, err := filepath.EvalSymlinks(dir); err == nil {
			_, inside := relativeTo(realRoot, resolved)
			return !inside
		}
		if parent := filepath.Dir(dir); parent == dir {
			return false
		}
	}
}

// openKinds says which kinds of file a confined lookup opens; of the
// others it returns only the info.
type openKinds uint8

const (
	openNone openKinds = iota
	openRegular
	openRegularOrDir
)

func (k openKinds) has(info fs.FileInfo) bool {
	return k >= openRegular && info.Mode().IsRegular() || k == openRegularOrDir && info.IsDir()
}

// openWalked is the portable confined open: the lstat walk, then a stat
// and, for the kinds want names, an open.
func openWalked(root, path string, mode Symlinks, want openKinds) (fs.FileInfo, *os.File, error) {
	info, f, _, err := openWalkedLinked(root, path, mode, want)
	return info, f, err
}

// openWalkedLinked is openWalked that also reports whether path's last
// element is a link, and that, for the cache's lookup (want openRegular),
// refuses a directory the server may not read, as file_server does
// (unreadableDir).
func openWalkedLinked(root, path string, mode Symlinks, want openKinds) (fs.FileInfo, *os.File, bool, error) {
	viaLink, err := walkConfined(root, path, mode)
	if err != nil {
		return nil, nil, viaLink, err
	}
	info, err := os.Stat(path)
	if err == nil && want == openRegular && info.IsDir() {
		if d, derr := openFile(path); derr != nil && unreadableDir(info, derr) {
			return nil, nil, viaLink, derr
		} else if d != nil {
			d.Close()
		}
	}
	if err != nil || !want.has(info) {
		return info, nil, viaLink, err
	}
	f, err := openFile(path)
	return info, f, viaLink, err
}

// StatConfined returns the info of path below root, resolved as mode says,
// for readers outside the cache (the directory listings): the same
// confinement as a cache lookup, and the same refusals.
func StatConfined(root, path string, mode Symlinks) (fs.FileInfo, error) {
	if mode == SymlinksFollow {
		return os.Stat(path)
	}
	info, _, err := openConfined(root, path, mode, openNone)
	return info, err
}

// OpenConfined opens a regular file or a directory below root, resolved
// as mode says. Other kinds of file (FIFOs, devices, sockets) are not
// opened: it answers fs.ErrNotExist for them, as a server answers 404.
func OpenConfined(root, path string, mode Symlinks) (*os.File, error) {
	var f *os.File
	var err error
	if mode == SymlinksFollow {
		var info fs.FileInfo
		if info, err = os.Stat(path); err == nil && openRegularOrDir.has(info) {
			f, err = openFile(path)
		}
	} else {
		_, f, err = openConfined(root, path, mode, openRegularOrDir)
	}
	if err == nil && f == nil {
		err = &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
	}
	return f, err
}

// IsRefused reports whether err is a refusal of the symlinks mode
// (ErrSymlink or ErrEscape), as opposed to a missing or unreadable file.
func IsRefused(err error) bool { return isConfinementError(err) }

// isConfinementError reports whether err is a refusal, which describes the
// path and may be cached like a missing file.
func isConfinementError(err error) bool {
	return errors.Is(err, errSymlink) || errors.Is(err, errEscape)
}
