//go:build linux && !flashserve_portable

package flashserve

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// linkedSites serves one root with file_server and with flash_serve on two
// sites sharing its cache, revalidate at an hour: only inotify, or the
// one-second bound of what it cannot see, can make a change visible.
type linkedSites struct {
	client              *http.Client
	fileServer, flashes []string
}

func startLinkedSites(t *testing.T, root, symlinks string) linkedSites {
	t.Helper()
	ports := [3]int{freePort(t), freePort(t), freePort(t)}
	opts := []string{"revalidate 1h"}
	if symlinks != "" {
		opts = append(opts, "symlinks "+symlinks)
	}
	loadSites(t, "",
		siteBlock(ports[0], root, "file_server")+
			siteBlock(ports[1], root, flashServe(opts...))+
			siteBlock(ports[2], root, flashServe(opts...)))
	client := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	s := linkedSites{client: client, fileServer: []string{fmt.Sprintf("http://127.0.0.1:%d", ports[0])}}
	for _, p := range ports[1:] {
		s.flashes = append(s.flashes, fmt.Sprintf("http://127.0.0.1:%d", p))
	}
	return s
}

// answer is what a comparison of two responses looks at.
type answer struct {
	status             int
	length, etag, last string
	body               []byte
	err                error
}

func (a answer) String() string {
	if a.err != nil {
		return "error: " + a.err.Error()
	}
	return fmt.Sprintf("%d, Content-Length %s, Etag %s, %d body bytes", a.status, a.length, a.etag, len(a.body))
}

func (s linkedSites) ask(base, name string) answer {
	resp, err := s.client.Get(base + "/" + name)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	if _, err := body.ReadFrom(resp.Body); err != nil {
		return answer{err: err}
	}
	return answer{status: resp.StatusCode, length: resp.Header.Get("Content-Length"), etag: resp.Header.Get("Etag"),
		last: resp.Header.Get("Last-Modified"), body: body.Bytes()}
}

func sameAnswer(a, b answer) bool {
	return a.err == nil && b.err == nil && a.status == b.status && a.length == b.length && a.etag == b.etag &&
		a.last == b.last && bytes.Equal(a.body, b.body)
}

// agree checks that every flash_serve site answers name as file_server
// does, twice each.
func (s linkedSites) agree(name string) error {
	want := s.ask(s.fileServer[0], name)
	if want.err != nil {
		return fmt.Errorf("file_server /%s: %w", name, want.err)
	}
	for _, base := range s.flashes {
		for range 2 {
			if got := s.ask(base, name); !sameAnswer(got, want) {
				return fmt.Errorf("/%s on %s: flash_serve %v, file_server %v", name, base, got, want)
			}
		}
	}
	return nil
}

// within waits up to d for agree(name), then checks that it still holds.
func (s linkedSites) within(t *testing.T, what, name string, d time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		err := s.agree(name)
		if err == nil {
			t.Logf("%s: /%s agrees after %v", what, name, time.Since(start).Round(time.Millisecond))
			break
		}
		if time.Since(start) > d {
			t.Fatalf("%s: not seen within %v: %v", what, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := s.agree(name); err != nil {
		t.Fatalf("%s, asked again: %v", what, err)
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func replaceByRename(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	writeFile(t, tmp, data)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestLinkedFilesFollowTheirTarget: a file reached through a symbolic link
// (its target in the same directory, or in another one), and a file with
// a second name outside the root (a hard link), change under a name that
// inotify reports for another entry or not at all. With revalidate at an
// hour, flash_serve must still answer as file_server does within the
// bound of what inotify cannot see (1 s; the test allows 1.5 s), on both
// sites that share the cache: before the fix the link kept its old length
// and ETag for revalidate, and a truncated target aborted every response.
func TestLinkedFilesFollowTheirTarget(t *testing.T) {
	for _, mode := range []string{"", "beneath"} {
		t.Run("symlinks "+cmpOr(mode, "follow"), func(t *testing.T) {
			base := t.TempDir()
			root := filepath.Join(base, "www")
			big := bytes.Repeat([]byte("0123456789abcdef"), 200000/16)
			writeFile(t, filepath.Join(root, "a.bin"), big)
			writeFile(t, filepath.Join(root, "small.txt"), []byte("small v1\n"))
			writeFile(t, filepath.Join(root, "other", "b.txt"), []byte("b v1\n"))
			writeFile(t, filepath.Join(base, "outside", "hard.txt"), []byte("hard v1\n"))
			writeFile(t, filepath.Join(base, "outside", "hardbig.bin"), big)
			for link, target := range map[string]string{
				"same.bin":     "a.bin",
				"link.txt":     "small.txt",
				"sub/far.txt":  "../other/b.txt",
				"dangling.txt": "other/later.txt",
			} {
				p := filepath.Join(root, link)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(target, p); err != nil {
					t.Fatal(err)
				}
			}
			for _, name := range []string{"hard.txt", "hardbig.bin"} {
				if err := os.Link(filepath.Join(base, "outside", name), filepath.Join(root, name)); err != nil {
					t.Fatal(err)
				}
			}
			s := startLinkedSites(t, root, mode)
			names := []string{"same.bin", "link.txt", "sub/far.txt", "dangling.txt", "hard.txt", "hardbig.bin"}
			for _, name := range names {
				if err := s.agree(name); err != nil {
					t.Fatal("before any change: ", err)
				}
			}
			bound := 1500 * time.Millisecond

			// The target of a link in the same directory, truncated in
			// place: its events name a.bin, not same.bin.
			if err := os.Truncate(filepath.Join(root, "a.bin"), 1000); err != nil {
				t.Fatal(err)
			}
			s.within(t, "same-directory target truncated", "same.bin", bound)
			// Rewritten in place, then replaced by rename.
			writeFile(t, filepath.Join(root, "small.txt"), []byte("small v2, longer\n"))
			s.within(t, "same-directory target rewritten", "link.txt", bound)
			replaceByRename(t, filepath.Join(root, "small.txt"), []byte("small v3 by rename\n"))
			s.within(t, "same-directory target renamed over", "link.txt", bound)
			// A target in another directory.
			replaceByRename(t, filepath.Join(root, "other", "b.txt"), []byte("b v2, by rename\n"))
			s.within(t, "other-directory target renamed over", "sub/far.txt", bound)
			// A dangling link whose target appears.
			writeFile(t, filepath.Join(root, "other", "later.txt"), []byte("later\n"))
			s.within(t, "dangling link's target created", "dangling.txt", bound)
			// Hard links written through their name outside the root
			// (the same inode: O_TRUNC, no rename).
			writeFile(t, filepath.Join(base, "outside", "hard.txt"), []byte("hard v2, written outside\n"))
			s.within(t, "hard link written elsewhere", "hard.txt", bound)
			writeFile(t, filepath.Join(base, "outside", "hardbig.bin"), append(big, big...))
			s.within(t, "large hard link written elsewhere", "hardbig.bin", bound)
			for _, name := range names {
				if err := s.agree(name); err != nil {
					t.Fatal("at the end: ", err)
				}
			}
		})
	}
}

// TestUnlinkedFilesStayWatched: the fix for links must not cost ordinary
// files their inotify trust: a plain file is answered from its entry for
// as long as nothing changes (no second lookup past the first), and a
// change to it is seen at once.
func TestUnlinkedFilesStayWatched(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "plain.txt"), []byte("plain v1\n"))
	port := freePort(t)
	loadSites(t, "", siteBlock(port, root, flashServe("revalidate 1h")))
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	url := fmt.Sprintf("http://127.0.0.1:%d/plain.txt", port)
	if status, _, body := get(t, client, url); status != 200 || string(body) != "plain v1\n" {
		t.Fatalf("first request: %d %q", status, body)
	}
	before := snapshot().Statacc.Misses
	time.Sleep(1200 * time.Millisecond) // past the bound of an entry trusted briefly
	for range 3 {
		if status, _, body := get(t, client, url); status != 200 || string(body) != "plain v1\n" {
			t.Fatalf("again: %d %q", status, body)
		}
	}
	if after := snapshot().Statacc.Misses; after != before {
		t.Errorf("a plain watched file was looked up again after 1.2 s (%d misses, want %d): it lost its inotify trust", after, before)
	}
	writeFile(t, filepath.Join(root, "plain.txt"), []byte("plain v2\n"))
	waitFor(t, "the rewrite seen", time.Second, func() bool {
		_, _, body := get(t, client, url)
		return string(body) == "plain v2\n"
	})
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// TestUnreadableDirectoryAnswersAsFileServer: file_server describes a
// path by opening it, so a directory the server may search but not read
// (0711), or neither (0700), is a 403 whatever it holds, an index file
// included; flash_serve answered 404, or served the index (200, 308).
// Permissions mean nothing to root: CI runs it as nobody on root's files
// (FLASHSERVE_TEST_FOREIGN_DIR); a user who owns the files runs it on
// owner-only modes.
func TestUnreadableDirectoryAnswersAsFileServer(t *testing.T) {
	foreign := os.Getenv(foreignDirEnv) != ""
	if !foreign && os.Geteuid() == 0 {
		t.Skip("root reads every directory; CI runs this test as nobody")
	}
	searchOnly, none := os.FileMode(0o311), os.FileMode(0o300)
	if foreign {
		searchOnly, none = 0o711, 0o700
	}
	modes := map[string]os.FileMode{"d711": searchOnly, "d700": none, "d711/inner": searchOnly}
	root := testDirModes(t, "unreadable-dirs", func(dir string) {
		for _, name := range []string{"d711/index.html", "d711/b.txt", "d700/index.html", "d700/x.txt", "d711/inner/index.html", "open/index.html"} {
			writeFile(t, filepath.Join(dir, name), []byte(name+"\n"))
		}
	}, modes)
	if !foreign {
		for name, mode := range modes {
			if err := os.Chmod(filepath.Join(root, name), mode); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() {
			for name := range modes {
				os.Chmod(filepath.Join(root, name), 0o755)
			}
		})
	}
	ports := [5]int{freePort(t), freePort(t), freePort(t), freePort(t), freePort(t)}
	loadSites(t, "",
		siteBlock(ports[0], root, "file_server")+
			siteBlock(ports[1], root, "flash_serve")+
			siteBlock(ports[2], root, "file_server browse")+
			siteBlock(ports[3], root, "flash_serve browse")+
			siteBlock(ports[4], root, flashServe("symlinks beneath")))
	client := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer client.CloseIdleConnections()
	for _, pair := range [][2]int{{ports[0], ports[1]}, {ports[2], ports[3]}, {ports[0], ports[4]}} {
		for _, name := range []string{"d711/", "d711", "d711/index.html", "d711/b.txt", "d711/inner/", "d711/inner/index.html",
			"d700/", "d700", "d700/x.txt", "open/", "open", "missing/"} {
			want := statusOf(t, client, pair[0], name)
			for range 2 {
				if got := statusOf(t, client, pair[1], name); got != want {
					t.Errorf("/%s: flash_serve %s, file_server %s", name, got, want)
				}
			}
		}
	}
	if got := statusOf(t, client, ports[1], "d711/"); !strings.HasPrefix(got, "403") {
		t.Errorf("/d711/: %s, want file_server's 403", got)
	}
}

// statusOf is the status and the Location of a GET of name on port.
func statusOf(t *testing.T, c *http.Client, port int, name string) string {
	t.Helper()
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/%s", port, name))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get("Location"))
}
