package statacc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/flashserve/caddy-flash-serve/internal/fileio"
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
	// the root; absolute links are refused, as RESOLVE_BENEATH does. On Linux
	// 5.6+ the kernel enforces it (openat2); elsewhere an lstat walk checks
	// each element before the open, which a link swapped in between can
	// defeat.
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

// walkConfined resolves path below root as RESOLVE_BENEATH does, one
// element at a time with lstat and readlink: the portable confinement,
// racy by nature. A link's text is resolved from its directory (40 links
// at most); a `..` at the root or an absolute link leaves the root even if
// the path comes back inside, and a name is looked for only if every step
// before it stayed inside, so the first failure is the kernel's. Under
// deny any link is refused. lastIsLink: path's last element is a link
// (allowed, or, with an error, missing, looping or leaving).
func walkConfined(root, path string, mode Symlinks) (lastIsLink bool, err error) {
	rel, ok := relativeTo(root, path)
	if !ok {
		return false, errEscape
	}
	if rel == "." {
		return false, nil
	}
	root = filepath.Clean(root)
	// todo holds the elements left to resolve, the next last; reqLeft
	// counts the request path's own, at its bottom.
	todo := reverse(splitElems(filepath.ToSlash(rel)))
	reqLeft := len(todo)
	var at []string // the resolved directories below root, each a real one
	links, steps := 0, 0
	for len(todo) > 0 {
		elem := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		fromRequest := len(todo) < reqLeft
		if fromRequest {
			reqLeft = len(todo)
		}
		if steps++; steps > maxWalkSteps {
			return lastIsLink, &fs.PathError{Op: "open", Path: path, Err: syscall.ELOOP}
		}
		if elem == "." || elem == ".." {
			if len(at) > 0 && runtime.GOOS != "windows" { // Windows does not check traversal
				// The kernel looks . and .. up, which takes the right to search.
				if _, err := os.Lstat(filepath.Join(root, filepath.Join(at...)) + string(filepath.Separator) + "."); err != nil {
					return lastIsLink, err
				}
			}
			if elem == ".." {
				if len(at) == 0 {
					return lastIsLink, errEscape
				}
				at = at[:len(at)-1]
			}
			continue
		}
		cur := filepath.Join(root, filepath.Join(at...), elem)
		fi, err := os.Lstat(cur)
		if err != nil {
			return lastIsLink, err
		}
		link, linked, err := linkText(cur, fi)
		if !linked {
			if len(todo) > 0 && !fi.IsDir() {
				return lastIsLink, &fs.PathError{Op: "lstat", Path: cur, Err: syscall.ENOTDIR}
			}
			at = append(at, elem)
			continue
		}
		if fromRequest && reqLeft == 0 {
			lastIsLink = true
		}
		if mode == SymlinksDeny {
			return false, errSymlink
		}
		if links++; links > maxLinks {
			return lastIsLink, &fs.PathError{Op: "open", Path: path, Err: syscall.ELOOP}
		}
		if err != nil {
			return lastIsLink, err
		}
		// Refuse absolute links even when they point inside the root, as
		// RESOLVE_BENEATH does (`\srv` and `C:x` are rooted on Windows).
		if filepath.IsAbs(link) || filepath.VolumeName(link) != "" || strings.HasPrefix(filepath.ToSlash(link), "/") {
			return lastIsLink, errEscape
		}
		todo = append(todo, reverse(splitElems(filepath.ToSlash(link)))...)
	}
	return lastIsLink, nil
}

// linkText reports whether the walk follows fi as a link, and its text:
// a symbolic link, or on Windows a junction (an irregular file whose
// target Readlink reads); other reparse points are walked as what they
// are.
func linkText(path string, fi fs.FileInfo) (text string, linked bool, err error) {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		text, err = os.Readlink(path)
		return text, true, err
	case runtime.GOOS == "windows" && fi.Mode()&fs.ModeIrregular != 0:
		text, err = os.Readlink(path)
		return text, err == nil, nil
	}
	return "", false, nil
}

// maxLinks is the links one resolution follows, as Linux's MAXSYMLINKS.
// maxWalkSteps bounds the elements it resolves, links' texts included, so
// that links with long texts cost a bounded number of lstats; past it the
// answer is a loop.
const (
	maxLinks     = 40
	maxWalkSteps = 1024
)

// splitElems splits a slash-separated path into its non-empty elements.
func splitElems(p string) []string {
	var out []string
	for _, e := range strings.Split(p, "/") {
		if e != "" {
			out = append(out, e)
		}
	}
	return out
}

func reverse(s []string) []string {
	slices.Reverse(s)
	return s
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
// element is a link and, for the cache (openRegular), refuses a directory
// the server may not read (unreadableDir).
func openWalkedLinked(root, path string, mode Symlinks, want openKinds) (fs.FileInfo, *os.File, bool, error) {
	info, viaLink, open, err := describeWalked(root, path, mode, want)
	if !open {
		return info, nil, viaLink, err
	}
	f, err := fileio.OpenRead(path)
	return info, f, viaLink, err
}

// describeWalked is openWalkedLinked up to its open, which open says the
// caller makes.
func describeWalked(root, path string, mode Symlinks, want openKinds) (info fs.FileInfo, viaLink, open bool, err error) {
	viaLink, err = walkConfined(root, path, mode)
	if err != nil {
		return nil, viaLink, false, err
	}
	info, err = os.Stat(path)
	if err == nil && want == openRegular && info.IsDir() {
		if d, derr := fileio.OpenRead(path); derr != nil && unreadableDir(info, derr) {
			return nil, viaLink, false, derr
		} else if d != nil {
			d.Close()
		}
	}
	if err != nil || !want.has(info) {
		return info, viaLink, false, err
	}
	return info, viaLink, true, nil
}

// StatConfined returns the info of path below root, resolved as mode
// says, with a cache lookup's confinement and refusals.
func StatConfined(root, path string, mode Symlinks) (fs.FileInfo, error) {
	if mode == SymlinksFollow {
		return os.Stat(path)
	}
	info, _, err := openConfined(root, path, mode, openNone)
	return info, err
}

// OpenConfined opens a regular file or a directory below root, resolved
// as mode says; other kinds answer fs.ErrNotExist, as a server's 404.
func OpenConfined(root, path string, mode Symlinks) (*os.File, error) {
	var f *os.File
	var err error
	if mode == SymlinksFollow {
		var info fs.FileInfo
		if info, err = os.Stat(path); err == nil && openRegularOrDir.has(info) {
			f, err = fileio.OpenRead(path)
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
// (errSymlink or errEscape), as opposed to a missing or unreadable file:
// it describes the path, and is cached like a missing file.
func IsRefused(err error) bool {
	return errors.Is(err, errSymlink) || errors.Is(err, errEscape)
}
