package flashserve

import (
	"path"
	"strings"
	"testing"
)

// TestCleanAbs checks cleanAbs against path.Clean on every string of up
// to 8 bytes over the alphabet that makes paths unclean ('/', '.', 'a').
func TestCleanAbs(t *testing.T) {
	const alphabet = "/.a"
	var walk func(p string)
	n := 0
	check := func(p string) {
		n++
		want := strings.HasPrefix(p, "/") && path.Clean(p) == p
		if got := cleanAbs(p); got != want {
			t.Errorf("cleanAbs(%q) = %v, want %v (path.Clean gives %q)", p, got, want, path.Clean(p))
		}
	}
	walk = func(p string) {
		check(p)
		if len(p) >= 8 {
			return
		}
		for i := range len(alphabet) {
			walk(p + alphabet[i:i+1])
		}
	}
	walk("")
	for _, p := range []string{"/srv/www", "/srv/www/", "/srv//www", "/srv/./www", "/srv/../www", "/...", "/.x/x.", "/a/b.txt"} {
		check(p)
	}
	t.Logf("%d paths", n)
}
