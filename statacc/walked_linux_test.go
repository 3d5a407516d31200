//go:build linux && !flashserve_portable

package statacc

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestWalkedOpenAnswersAsOpenat2: the lstat walk that stands in for
// openat2 (Linux before 5.6, a seccomp filter, other OSes) gives the
// answer openat2's RESOLVE_BENEATH gives, and tells a link as it does,
// for the links users make and the ones that try to leave the root:
// absolute ones, relative ones that leave and come back
// (`../root/a.txt`: the kernel refuses any step above the root), missing
// targets outside, links through a directory link that leaves (helper-6's
// review found the walk serving the first and answering 404 to the
// second). Under deny, every link is refused.
func TestWalkedOpenAnswersAsOpenat2(t *testing.T) {
	base := t.TempDir()
	root, out := filepath.Join(base, "root"), filepath.Join(base, "out")
	for _, d := range []string{filepath.Join(root, "sub", "deep"), filepath.Join(root, "a", "b", "c"), out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(root, "a.txt"), filepath.Join(root, "a", "x"), filepath.Join(root, "sub", "b.txt"), filepath.Join(out, "f")} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"in":            "a.txt",
		"sub/up":        "../a.txt",
		"sub/deep/up2":  "../../a.txt",
		"dl":            "sub/deep",
		"sub/b-link":    "./b.txt",
		"comeback":      "../root/a.txt",
		"sub/comeback2": "../../root/a.txt",
		"esc":           "../out/f",
		"escmissing":    "../out/missing",
		"abs-in":        filepath.Join(root, "a.txt"),
		"abs-out":       filepath.Join(out, "f"),
		"d":             "../out",
		"viad":          "d/f",
		"viadmissing":   "d/missing",
		"dangling":      "nothere",
		"loop":          "loop",
		// helper-7's review of the first fix, which counted a link's text
		// without following the links in it: a directory link goes
		// several levels down (thrudeep is inside), a link met in a
		// link's text may climb out or be absolute (viacb, viaabs,
		// nestedclimb are outside).
		"dslash":          "sub//b.txt",
		"trail":           "sub/",
		"dotdot":          "./sub/./../a.txt",
		"deeplink":        "a/b/c",
		"thrudeep":        "deeplink/../../x",
		"thrudeepmiss":    "deeplink/../../missing",
		"a/up":            "..",
		"nestedclimb":     "a/up/../root/a.txt",
		"nestedclimbmiss": "a/up/../nothere",
		"a/cb":            "../../root/a.txt",
		"viacb":           "a/cb",
		"a/abs":           filepath.Join(root, "a.txt"),
		"viaabs":          "a/abs",
		"a/b/c/ml":        "../../missing",
		"a/b/c/l2":        "../../x",
		// helper-8's: `..` and `.` are looked up in their directory,
		// which takes the right to search it (noX is 0600; root may
		// search any directory, so these differ only for other users).
		"viaNoXmiss":      "noX/../missing",
		"viaNoXesc":       "noX/../..",
		"viaNoX":          "noX/../a.txt",
		"viaNoXdot":       "noX/.",
		"sub/deep/upout":  "../../../out/f",
		"sub/deep/upleft": "../../sub/b.txt",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	class := func(err error) string {
		var errno syscall.Errno
		switch {
		case err == nil:
			return "ok"
		case errors.Is(err, errEscape):
			return "leaves the root"
		case errors.Is(err, errSymlink):
			return "a link (deny)"
		case errors.Is(err, fs.ErrPermission):
			return "no permission"
		case errors.Is(err, fs.ErrNotExist):
			return "missing"
		case errors.As(err, &errno) && errno == syscall.ELOOP:
			return "loop"
		case errors.As(err, &errno) && errno == syscall.ENOTDIR:
			return "not a directory"
		}
		return err.Error()
	}
	paths := []string{"a.txt", "dl/up2", "dl/../a.txt", "dl/upout", "dl/upleft", "missing", "deeplink/l2", "deeplink/ml", "trail/b.txt", "viaNoX/x"}
	for name := range links {
		paths = append(paths, name)
	}
	if err := os.Symlink("root", filepath.Join(base, "rootlink")); err != nil {
		t.Fatal(err)
	}
	noX := filepath.Join(root, "noX")
	if err := os.Mkdir(noX, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(noX, 0o755) })
	// The root as configured: plain, with a trailing slash, through a link.
	roots := []string{root, root + "/", filepath.Join(base, "rootlink")}
	for _, mode := range []Symlinks{SymlinksBeneath, SymlinksDeny} {
		for i := range len(paths) * len(roots) {
			p, r := paths[i/len(roots)], roots[i%len(roots)]
			full := filepath.Join(r, p)
			_, f1, link1, err1 := openConfinedLinked(r, full, mode, openRegular)
			_, f2, link2, err2 := openWalkedLinked(r, full, mode, openRegular)
			for _, f := range []*os.File{f1, f2} {
				if f != nil {
					f.Close()
				}
			}
			if c1, c2 := class(err1), class(err2); c1 != c2 || link1 != link2 {
				t.Errorf("%v %s (root %s): openat2 %s (link %v), the walk %s (link %v)", mode, p, r, c1, link1, c2, link2)
			}
		}
	}
}
