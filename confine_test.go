package flashserve

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// confineTree builds a root with links of every kind the symlinks option
// must judge, and a sibling folder outside it holding a secret.
func confineTree(t *testing.T) (root string, secret []byte) {
	t.Helper()
	base := t.TempDir()
	root = filepath.Join(base, "site")
	sibling := filepath.Join(base, "sibling")
	for _, d := range []string{root, filepath.Join(root, "sub"), sibling} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret = []byte("secret outside the root\n")
	write := func(p string, b []byte) {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "a.txt"), []byte("inside\n"))
	write(filepath.Join(root, "sub", "b.txt"), []byte("inside sub\n"))
	write(filepath.Join(sibling, "secret.txt"), secret)
	links := map[string]string{
		"etc":         "/etc",
		"passwd":      "/etc/passwd",
		"sibling":     "../sibling",
		"sibling_abs": sibling,
		"parent":      "..",
		"loop1":       "loop2",
		"loop2":       "loop1",
		"inner":       "a.txt",
		"inner_dir":   "sub",
		"sub/up":      "../a.txt",
		"swap":        "a.txt",
	}
	// An absolute link into the root: the kernel's RESOLVE_BENEATH refuses
	// every absolute link, and the portable walk does the same.
	links["abs_inner"] = filepath.Join(root, "a.txt")
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	return root, secret
}

func TestSymlinkConfinement(t *testing.T) {
	root, secret := confineTree(t)
	ports := map[string]int{}
	var sites bytes.Buffer
	for _, mode := range []string{"follow", "deny", "beneath"} {
		ports[mode] = freePort(t)
		sites.WriteString(siteBlock(ports[mode], root, flashServe("symlinks "+mode)))
	}
	loadSites(t, "", sites.String())
	c := &http.Client{Timeout: 10 * time.Second}

	const ok, forbidden, refused = 200, 403, -1 // refused: anything but 200
	cases := []struct {
		path                  string
		follow, deny, beneath int
	}{
		{"/a.txt", ok, ok, ok},
		{"/sub/b.txt", ok, ok, ok},
		{"/inner", ok, forbidden, ok},
		{"/inner_dir/b.txt", ok, forbidden, ok},
		{"/sub/up", ok, forbidden, ok},
		{"/etc/hostname", ok, forbidden, forbidden},
		{"/passwd", ok, forbidden, forbidden},
		{"/sibling/secret.txt", ok, forbidden, forbidden},
		{"/sibling_abs/secret.txt", ok, forbidden, forbidden},
		{"/parent/sibling/secret.txt", ok, forbidden, forbidden},
		{"/parent/site/a.txt", ok, forbidden, forbidden},
		{"/loop1", refused, forbidden, refused},
		{"/abs_inner", ok, forbidden, forbidden},
		{"/missing", 404, 404, 404},
	}
	for _, tc := range cases {
		for mode, want := range map[string]int{"follow": tc.follow, "deny": tc.deny, "beneath": tc.beneath} {
			if tc.path == "/etc/hostname" && want == ok {
				if _, err := os.Stat("/etc/hostname"); err != nil {
					continue
				}
			}
			// Twice: the second answer comes from the cache.
			for round := range 2 {
				status, _, body := get(t, c, fmt.Sprintf("http://127.0.0.1:%d%s", ports[mode], tc.path))
				switch {
				case want == refused && status == ok,
					want != refused && status != want:
					t.Errorf("%s %s (round %d): status %d, want %d", mode, tc.path, round, status, want)
				}
				if mode != "follow" && bytes.Contains(body, secret) {
					t.Errorf("%s %s: the secret leaked", mode, tc.path)
				}
			}
		}
	}
}
