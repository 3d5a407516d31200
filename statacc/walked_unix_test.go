//go:build unix

package statacc

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestWalkedOpenTellsLinksAndUnreadableDirs: the confined open without
// openat2 (Linux before 5.6, a seccomp filter without it, other OSes)
// tells the cache's lookup what the openat2 path tells it: that the last
// element is a link (so the entry is trusted briefly), and that a
// directory it may search but not read is refused (a 403, as
// file_server's). Permissions mean nothing to root: CI runs it as nobody
// too.
func TestWalkedOpenTellsLinksAndUnreadableDirs(t *testing.T) {
	root := t.TempDir()
	for name, data := range map[string]string{"a.txt": "a", "d/index.html": "i", "open/index.html": "o"} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a.txt", filepath.Join(root, "link.txt")); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []Symlinks{SymlinksBeneath, SymlinksFollow} {
		info, f, viaLink, err := openWalkedLinked(root, filepath.Join(root, "link.txt"), mode, openRegular)
		if err != nil || f == nil || !info.Mode().IsRegular() {
			t.Fatalf("%v: link.txt: %v, %v", mode, info, err)
		}
		f.Close()
		if !viaLink {
			t.Errorf("%v: link.txt not reported as reached through a link", mode)
		}
		_, f, viaLink, err = openWalkedLinked(root, filepath.Join(root, "a.txt"), mode, openRegular)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if viaLink {
			t.Errorf("%v: a.txt reported as reached through a link", mode)
		}
		if info, _, _, err := openWalkedLinked(root, filepath.Join(root, "open"), mode, openRegular); err != nil || !info.IsDir() {
			t.Errorf("%v: a readable directory: %v, %v", mode, info, err)
		}
	}
	if os.Geteuid() == 0 {
		t.Log("root reads every directory: the unreadable directory is not tested")
		return
	}
	d := filepath.Join(root, "d")
	if err := os.Chmod(d, 0o311); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(d, 0o755)
	if _, _, _, err := openWalkedLinked(root, d, SymlinksBeneath, openRegular); !errors.Is(err, fs.ErrPermission) {
		t.Errorf("a directory this user may search but not read: %v, want a permission error", err)
	}
	// Listings still stat it: only the cache's lookup refuses it.
	if info, _, err := openWalked(root, d, SymlinksBeneath, openNone); err != nil || !info.IsDir() {
		t.Errorf("stat of the unreadable directory: %v, %v", info, err)
	}
}

// TestWalkedOpenTellsDanglingLinks: a link as the last element whose
// target is missing, or which loops, is reported as a link by the walked
// open too, as by openat2's: its negative answer is trusted for a second,
// since its target may appear with no event for its name (helper-3's
// review: the walked open said "no link", and the 404 stayed for
// revalidate). A missing directory on the way is no link.
func TestWalkedOpenTellsDanglingLinks(t *testing.T) {
	root := t.TempDir()
	for name, target := range map[string]string{"dangling": "nothere", "loop": "loop", "dirlink": "nodir"} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, mode := range []Symlinks{SymlinksBeneath, SymlinksFollow} {
		for _, c := range []struct {
			path string
			link bool
		}{{"dangling", true}, {"loop", true}, {"dirlink/file", false}, {"missing", false}} {
			_, f, viaLink, err := openWalkedLinked(root, filepath.Join(root, c.path), mode, openRegular)
			if err == nil {
				f.Close()
				t.Fatalf("%v: %s opened", mode, c.path)
			}
			if viaLink != c.link {
				t.Errorf("%v: %s: reported as a link %v, want %v (%v)", mode, c.path, viaLink, c.link, err)
			}
			if got := unwatchable(filepath.Join(root, c.path), nil, viaLink, err) == symLinked; got != c.link {
				t.Errorf("%v: %s: trusted briefly %v, want %v", mode, c.path, got, c.link)
			}
		}
	}
}

// TestWalkedOpenTellsEscapingLinks: a last element that links out of the
// root, directly, through a directory link on its way, or by an absolute
// target, is refused as leaving the root and reported as a link, as
// openat2's open reports it: the refusal is trusted for a second, since
// the directory link may be turned back inside with no event for this
// name (helper-5's review: the walked open said "no link", and the 403
// stayed for revalidate).
func TestWalkedOpenTellsEscapingLinks(t *testing.T) {
	base := t.TempDir()
	root, out := filepath.Join(base, "root"), filepath.Join(base, "out")
	for _, d := range []string{root, out} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(out, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"d": "../out", "viad": "d/f", "esc": "../out/f", "abs": filepath.Join(out, "f")} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"viad", "esc", "abs"} {
		_, f, viaLink, err := openWalkedLinked(root, filepath.Join(root, name), SymlinksBeneath, openRegular)
		if err == nil {
			f.Close()
			t.Fatalf("%s: opened, though it leaves the root", name)
		}
		if !errors.Is(err, errEscape) {
			t.Errorf("%s: %v, want the root's refusal", name, err)
		}
		if !viaLink || unwatchable(filepath.Join(root, name), nil, viaLink, err) != symLinked {
			t.Errorf("%s: reported as a link %v: its refusal would be trusted for revalidate", name, viaLink)
		}
	}
}
