package flashserve

import (
	"fmt"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// TestCleanAbsOfLongPaths checks cleanAbs against path.Clean on paths
// longer than indexPair's window, with an empty, "." or ".." element at
// every place, across the windows' boundaries too.
func TestCleanAbsOfLongPaths(t *testing.T) {
	for _, n := range []int{63, 64, 65, 127, 128, 129, 200, 3500} {
		clean := "/" + strings.Repeat("abcdefgh/", n/9+1)[:n-2] + "z"
		if !cleanAbs(clean) || path.Clean(clean) != clean {
			t.Fatalf("%d bytes: cleanAbs %v, path.Clean changes it: %v", len(clean), cleanAbs(clean), path.Clean(clean) != clean)
		}
		for i := 1; i < len(clean); i++ {
			for _, bad := range []string{"/", "/.", "/..", "/./", "/../"} {
				p := clean[:i] + bad + clean[i:]
				want := path.Clean(p) == p
				if got := cleanAbs(p); got != want {
					t.Fatalf("cleanAbs of %d bytes with %q at %d = %v, want %v", len(p), bad, i, got, want)
				}
			}
		}
	}
}

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

// TestHideListAsFilepathMatch checks that the classified hide list hides
// exactly what file_server's rules with filepath.Match hide, for literal
// entries (compared) and glob entries (matched), with and without a
// separator, over paths that are clean and paths that are not.
func TestHideListAsFilepathMatch(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the paths below are Unix paths")
	}
	patterns := []string{
		"/srv/site/Caddyfile", "Caddyfile", ".secret", "private", "*.bak", "/srv/site/priv*",
		`a\*b`, "a*b", "[ab].txt", "[", "/srv/site", "/srv/site/a", "?", "/srv/site/[", "a]b", "x-y",
	}
	paths := []string{
		"/srv/site/Caddyfile", "/srv/site/Caddyfile.bak", "/srv/site/a/Caddyfile", "/srv/site/.secret",
		"/srv/site/.secret/x", "/srv/site/private/key", "/srv/site/privates", "/srv/site/x.bak", "/srv/site/a*b",
		"/srv/site/aXb", "/srv/site/a.txt", "/srv/site/c.txt", "/srv/site/[", "/srv/site", "/srv/site/a",
		"/srv/site/a/b", "/srv/site/ab", "/srv/site/a]b", "/srv/site/x-y", "/srv/site//a", "/srv/site/./a",
		"/srv/site/../site/a", "/srv/site/", "/", "/srv/site/b/../Caddyfile",
	}
	// oracle is file_server's fileHidden: filepath.Match for every entry.
	oracle := func(filename string, hide []string) bool {
		filename = filepath.Clean(filename)
		for _, h := range hide {
			if !strings.Contains(h, "/") {
				for _, elem := range strings.Split(filename, "/") {
					if ok, _ := filepath.Match(h, elem); ok {
						return true
					}
				}
			} else if after, ok := strings.CutPrefix(filename, h); ok && strings.HasPrefix(after, "/") {
				return true
			}
			if ok, _ := filepath.Match(h, filename); ok {
				return true
			}
		}
		return false
	}
	for _, h := range patterns {
		for _, h2 := range append([]string{""}, patterns...) {
			hide := []string{h}
			if h2 != "" {
				hide = append(hide, h2)
			}
			hl := newHideList(hide)
			for _, p := range paths {
				if got, want := fileHidden(p, hl), oracle(p, hide); got != want {
					t.Errorf("hide %q, %q: hidden %v, filepath.Match says %v", hide, p, got, want)
				}
			}
		}
	}
	if hl := newHideList([]string{"/srv/site/Caddyfile", "*.bak", `a\*b`}); !hl[0].literal || hl[1].literal || hl[2].literal {
		t.Errorf("classified %+v: only the first entry is a literal", hl)
	}
}

// TestPlaceholderValueExpand checks each form of a root or fs value: one
// {http.vars.*} placeholder read from the vars (a string as it is, another
// type formatted by the replacer, none as empty), a literal as it is, and
// anything else through the replacer.
func TestPlaceholderValueExpand(t *testing.T) {
	req, _ := http.NewRequest("GET", "http://example.com/x", nil)
	repl := caddy.NewReplacer()
	req = caddyhttp.PrepareRequest(req, repl, &discardWriter{h: http.Header{}}, &caddyhttp.Server{})
	caddyhttp.SetVar(req.Context(), "root", "/srv/www")
	caddyhttp.SetVar(req.Context(), "port", 8080)
	caddyhttp.SetVar(req.Context(), "blank", "")
	repl.Set("site", "docs")
	for value, want := range map[string]string{
		"{http.vars.root}":     "/srv/www",
		"{http.vars.port}":     "8080",
		"{http.vars.blank}":    "",
		"{http.vars.missing}":  "",
		"/srv/literal":         "/srv/literal",
		"":                     "",
		"/srv/{site}":          "/srv/docs",
		"{http.vars.root}/sub": "/srv/www/sub",
		"{http.vars.{site}}":   repl.ReplaceAll("{http.vars.{site}}", ""),
	} {
		if got := newPlaceholderValue(value).expand(req, repl, ""); got != want {
			t.Errorf("%q expands to %q, want %q", value, got, want)
		}
	}
	pv := newPlaceholderValue("{http.vars.root}")
	if n := testing.AllocsPerRun(100, func() { pv.expand(req, repl, "") }); n != 0 {
		t.Errorf("{http.vars.root}: %v allocations, want 0", n)
	}
}

// TestHiddenAsFileServer serves a root that holds its own Caddyfile
// through flash_serve and file_server, each with the same hide entries (a
// literal with a separator, a literal element, a glob), and checks that
// both answer every path with the same status: the Caddyfile, which the
// directive hides as file_server's does, and the hidden entries are 404s.
func TestHiddenAsFileServer(t *testing.T) {
	root := t.TempDir()
	for _, name := range []string{"Caddyfile", "shown.txt", "old.bak", "secret.txt", "sub/secret.txt", "sub/x.txt", "private/k.txt"} {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hide := "hide " + filepath.Join(root, "private") + " secret.txt *.bak"
	flash, file := freePort(t), freePort(t)
	text := (&caddyGlobals{}).text(t) + siteBlock(flash, root, flashServe(hide)) + siteBlock(file, root, block("file_server", hide))
	cfgPath := filepath.Join(root, "Caddyfile")
	cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(text), map[string]any{"filename": cfgPath})
	if err != nil {
		t.Fatalf("adapting: %v\n%s", err, text)
	}
	loadConfig(t, cfg)
	c := &http.Client{Timeout: 10 * time.Second}
	for _, p := range []string{"/Caddyfile", "/shown.txt", "/old.bak", "/secret.txt", "/sub/secret.txt", "/sub/x.txt", "/private/k.txt", "/sub/../Caddyfile", "//Caddyfile"} {
		want, _, _ := get(t, c, fmt.Sprintf("http://127.0.0.1:%d%s", file, p))
		got, _, _ := get(t, c, fmt.Sprintf("http://127.0.0.1:%d%s", flash, p))
		if got != want {
			t.Errorf("%s: flash_serve %d, file_server %d", p, got, want)
		}
		if hidden := p != "/shown.txt" && p != "/sub/x.txt"; hidden != (got == http.StatusNotFound) {
			t.Errorf("%s: status %d, hidden %v", p, got, hidden)
		}
	}
}
