//go:build linux && !flashserve_portable

package statacc

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flashserve/caddy-flash-serve/internal/proctest"
)

// What the mount tests hold a cache to: a mount or an unmount (none of
// which sends an inotify event) is seen within mountSeenBound, and an
// unmount of a filesystem the cache held descriptors on succeeds within
// unmountBound of the last request. Both are bounds of "seen at all"
// against "stale until revalidate" (an hour here): the delays measured
// are logged.
const (
	mountSeenBound = 2 * time.Second
	unmountBound   = 5 * time.Second
)

// mountChildEnv makes TestMountsSeen the serving side of its "nobody"
// runs: a cache in a process of another user, driven through its stdin.
const mountChildEnv = "FLASHSERVE_TEST_MOUNT_CHILD"

// nobody is the user the serving side runs as in the "nobody" runs: it
// neither owns the files nor may write them.
const nobody = 65534

// looker is what a mount test asks of a cache: in this process, or in a
// child process running as nobody (childLooker). Each call of reset
// starts a fresh cache, so that one scenario's entries and descriptors
// do not count in another's.
type looker interface {
	// get is describe of a lookup of path, confined below root as the
	// looker's mode says.
	get(t *testing.T, root, path string) string
	// watched reports whether path has a fresh entry trusted until an
	// inotify event.
	watched(t *testing.T, path string) bool
	// openFiles is the descriptors the cache holds.
	openFiles(t *testing.T) int64
	// listings is the directories the cache holds listings of.
	listings(t *testing.T) int64
	reset(t *testing.T)
}

// localLooker is a looker of a cache of this process.
type localLooker struct {
	c    *Cache
	mode Symlinks
}

func (l *localLooker) reset(t *testing.T) {
	if l.c != nil {
		l.c.Close()
	}
	l.c = New(Options{Workers: 2, Revalidate: time.Hour})
}

func (l *localLooker) get(t *testing.T, root, path string) string {
	return describeConfined(t, l.c, root, l.mode, path)
}

func (l *localLooker) watched(_ *testing.T, path string) bool { return l.c.cachedWatched(path) }
func (l *localLooker) openFiles(*testing.T) int64             { return l.c.counts[OpenFiles].Load() }
func (l *localLooker) listings(*testing.T) int64              { return l.c.counts[Listings].Load() }

// childLooker is a looker of a cache in a child process of another user:
// the same test binary, running serveMountLookups.
type childLooker struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	answers *bufio.Reader
	stderr  *strings.Builder
	mu      sync.Mutex
}

// startChildLooker starts the test binary, copied to bin (where uid may
// run it), as uid, serving lookups with mode.
func startChildLooker(t *testing.T, bin string, uid int, mode Symlinks) *childLooker {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(bin, "statacc.test")
	if _, err := os.Stat(exe); err != nil {
		raw, err := os.ReadFile(self)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(exe, raw, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	answersR, answersW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestMountsSeen$", "-test.count=1", "-test.timeout=5m")
	cmd.Dir = bin
	cmd.Env = append(os.Environ(), mountChildEnv+"="+mode.String())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	cmd.ExtraFiles = []*os.File{answersW}
	l := &childLooker{cmd: cmd, answers: bufio.NewReader(answersR), stderr: &strings.Builder{}}
	cmd.Stdout, cmd.Stderr = l.stderr, l.stderr
	if l.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	answersW.Close()
	t.Cleanup(func() {
		l.in.Close() // ends the child's loop
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the serving process: %v\n%s", err, l.stderr)
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("the serving process did not end\n%s", l.stderr)
		}
		answersR.Close()
	})
	return l
}

// ask sends one command and returns its answer.
func (l *childLooker) ask(t *testing.T, cmd string) string {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := fmt.Fprintln(l.in, cmd); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, l.stderr)
	}
	line, err := l.answers.ReadString('\n')
	if err != nil {
		t.Fatalf("%s: no answer: %v\n%s", cmd, err, l.stderr)
	}
	s, err := strconv.Unquote(strings.TrimSuffix(line, "\n"))
	if err != nil {
		t.Fatalf("%s: bad answer %q", cmd, line)
	}
	return s
}

func (l *childLooker) reset(t *testing.T) { l.ask(t, "reset") }

func (l *childLooker) get(t *testing.T, root, path string) string {
	return l.ask(t, "get "+strconv.Quote(root)+" "+strconv.Quote(path))
}

func (l *childLooker) watched(t *testing.T, path string) bool {
	return l.ask(t, "watched "+strconv.Quote(path)) == "true"
}

func (l *childLooker) openFiles(t *testing.T) int64 { return l.count(t, "open") }

func (l *childLooker) listings(t *testing.T) int64 { return l.count(t, "listings") }

// count asks for a number.
func (l *childLooker) count(t *testing.T, cmd string) int64 {
	n, err := strconv.ParseInt(l.ask(t, cmd), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// serveMountLookups is the child's side: it answers childLooker's
// commands, one quoted line each on descriptor 3, until stdin ends.
func serveMountLookups(t *testing.T, mode Symlinks) {
	answers := os.NewFile(3, "answers")
	defer answers.Close()
	l := &localLooker{mode: mode}
	l.reset(t)
	defer func() { l.c.Close() }()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		verb, rest, _ := strings.Cut(in.Text(), " ")
		args := unquoteAll(t, rest)
		var answer string
		switch verb {
		case "reset":
			l.reset(t)
		case "get":
			answer = l.get(t, args[0], args[1])
		case "watched":
			answer = strconv.FormatBool(l.watched(t, args[0]))
		case "open":
			answer = strconv.FormatInt(l.openFiles(t), 10)
		case "listings":
			answer = strconv.FormatInt(l.listings(t), 10)
		default:
			t.Fatalf("unknown command %q", in.Text())
		}
		fmt.Fprintln(answers, strconv.Quote(answer))
	}
}

// unquoteAll splits a line of quoted strings.
func unquoteAll(t *testing.T, s string) []string {
	var out []string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		q, err := strconv.QuotedPrefix(s)
		if err != nil {
			t.Fatalf("bad arguments %q", s)
		}
		u, _ := strconv.Unquote(q)
		out = append(out, u)
		s = s[len(q):]
	}
	return out
}

// mountsTestDir makes a directory that every user may search, for the
// files root writes and nobody reads.
func mountsTestDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "statacc-mounts-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// put writes files (name → content) below dir, 0644 in 0755 directories.
func put(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// mount mounts as unix.Mount does, and unmounts (lazily) when the test
// ends, whatever happened: cleanups run last first, so a mount made later
// goes first.
func mount(t *testing.T, source, target, fstype string, flags uintptr, data string) {
	t.Helper()
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		t.Fatalf("mount %s on %s: %v", source, target, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil && err != unix.EINVAL {
			t.Errorf("unmount %s: %v", target, err)
		}
	})
}

// bind bind-mounts source (a file or a directory) over target.
func bind(t *testing.T, source, target string) {
	t.Helper()
	mount(t, source, target, "", unix.MS_BIND, "")
}

// tmpfsOver mounts an empty tmpfs over dir, searchable by everyone.
func tmpfsOver(t *testing.T, dir string) {
	t.Helper()
	mount(t, "tmpfs", dir, "tmpfs", 0, "size=4m,mode=0755")
}

// unmountLazily is umount -l: target is detached at once, and its
// filesystem unmounted once nothing uses it.
func unmountLazily(t *testing.T, target string) {
	t.Helper()
	if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
		t.Fatalf("umount -l %s: %v", target, err)
	}
}

// unmountWithin unmounts target, retrying while it is busy, and fails if
// it is still busy after limit; it returns how long it took.
func unmountWithin(t *testing.T, target string, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		err := unix.Unmount(target, 0)
		took := time.Since(start)
		switch {
		case err == nil:
			return took
		case err != unix.EBUSY:
			t.Fatalf("umount %s: %v", target, err)
		case took > limit:
			t.Fatalf("umount %s: still busy %v after the last request", target, took.Round(time.Millisecond))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// seenWithin polls l until a lookup of path says want, failing after
// mountSeenBound, and logs the delay since changed.
func seenWithin(t *testing.T, l looker, root, path, want string, changed time.Time, what string) time.Duration {
	t.Helper()
	for {
		got := l.get(t, root, path)
		took := time.Since(changed)
		if got == want {
			t.Logf("%s: seen after %v", what, took.Round(10*time.Microsecond))
			return took
		}
		if took > mountSeenBound {
			t.Fatalf("%s: %s is still %q %v after the change, want %q", what, path, got, mountSeenBound, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// cachedAs looks path up and checks that it says want, and that it is
// cached trusted until an inotify event (watched), or for a second only.
// What a lookup finds while a change of the mount table is not read yet
// is trusted for a second (it may come from a mount gone by the time the
// table is read): so an entry becomes watched within about a second.
func cachedAs(t *testing.T, l looker, root, path, want string, watched bool) {
	t.Helper()
	start := time.Now()
	for {
		for range 2 {
			if got := l.get(t, root, path); got != want {
				t.Fatalf("%s: %q, want %q", path, got, want)
			}
		}
		if want == "missing" {
			return
		}
		got := l.watched(t, path)
		if got == watched {
			return
		}
		if !watched || time.Since(start) > mountSeenBound {
			t.Fatalf("%s: trusted until an event %v, want %v", path, got, watched)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// listedBy makes l list dir: it looks up missing names in it, never
// looked up before, until the cache holds one listing more, and fails
// after four times the names a listing takes.
func listedBy(t *testing.T, l looker, root, dir string) {
	t.Helper()
	before := l.listings(t)
	for i := range 4 * defaultListAfter {
		if got := l.get(t, root, filepath.Join(dir, fmt.Sprintf("listed-%02d.css", i))); got != "missing" {
			t.Fatalf("listed-%02d.css: %q, want missing", i, got)
		}
		if l.listings(t) > before {
			return
		}
	}
	t.Fatalf("%s: not listed after %d missing names in it", dir, 4*defaultListAfter)
}

// mountScenarios are the changes of mounts a cache must see, each run on
// a fresh cache over a fresh directory (0755, files 0644, root's).
//
// unmounting marks the scenarios that wait for an unmount that is busy
// until the cache's descriptors are idle (2 to 4 s): they run with one
// mode of confinement only, which changes nothing in how descriptors are
// kept.
var mountScenarios = []struct {
	name       string
	unmounting bool
	run        func(t *testing.T, dir string, l looker)
}{
	{"tmpfs mounted over a cached directory", false, func(t *testing.T, dir string, l looker) {
		root := filepath.Join(dir, "www")
		put(t, root, map[string]string{"assets/app.css": "old", "assets/logo.svg": "svg"})
		app := filepath.Join(root, "assets/app.css")
		cachedAs(t, l, root, app, "3:old", true)
		cachedAs(t, l, root, filepath.Join(root, "assets/new.css"), "missing", true)
		assets := filepath.Join(root, "assets")
		tmpfsOver(t, assets)
		changed := time.Now()
		put(t, assets, map[string]string{"app.css": "fresh", "new.css": "new"})
		seenWithin(t, l, root, app, "5:fresh", changed, "the mount")
		seenWithin(t, l, root, filepath.Join(root, "assets/new.css"), "3:new", changed, "a name that was missing")
		seenWithin(t, l, root, filepath.Join(root, "assets/logo.svg"), "missing", changed, "a name the mount hides")
		// The directory is watched again, on the mount: a write in it is an
		// event.
		cachedAs(t, l, root, app, "5:fresh", true)
		changed = time.Now()
		put(t, assets, map[string]string{"app.css": "fresher"})
		seenWithin(t, l, root, app, "7:fresher", changed, "a write in the mounted directory")
	}},
	{"a tmpfs mounted over a listed directory", false, func(t *testing.T, dir string, l looker) {
		// A listing answers a missing name before any lookup: it must go
		// with the directory it lists.
		root := filepath.Join(dir, "www")
		assets := filepath.Join(root, "assets")
		put(t, root, map[string]string{"assets/app.css": "old"})
		cachedAs(t, l, root, filepath.Join(assets, "app.css"), "3:old", true)
		listedBy(t, l, root, assets)
		fresh, asked := filepath.Join(assets, "new.css"), filepath.Join(assets, "listed-00.css")
		cachedAs(t, l, root, fresh, "missing", true)
		tmpfsOver(t, assets)
		changed := time.Now()
		put(t, assets, map[string]string{"new.css": "new", "listed-00.css": "asked"})
		seenWithin(t, l, root, fresh, "3:new", changed, "a name the listing did not hold")
		seenWithin(t, l, root, asked, "5:asked", changed, "a name asked for before the listing")
	}},
	{"a release bind-mounted over an ancestor of a listed directory", false, func(t *testing.T, dir string, l looker) {
		root := filepath.Join(dir, "site/www")
		put(t, root, map[string]string{"index.html": "one"})
		put(t, dir, map[string]string{"next/www/index.html": "two!", "next/www/new.html": "new"})
		cachedAs(t, l, root, filepath.Join(root, "index.html"), "3:one", true)
		listedBy(t, l, root, root)
		fresh := filepath.Join(root, "new.html")
		cachedAs(t, l, root, fresh, "missing", true)
		bind(t, filepath.Join(dir, "next"), filepath.Join(dir, "site"))
		changed := time.Now()
		seenWithin(t, l, root, fresh, "3:new", changed, "a name the listing did not hold")
		seenWithin(t, l, root, filepath.Join(root, "index.html"), "4:two!", changed, "the mount")
	}},
	{"a release bind-mounted over a cached directory, then unmounted", false, func(t *testing.T, dir string, l looker) {
		root := filepath.Join(dir, "www")
		put(t, root, map[string]string{"assets/app.css": "v1"})
		put(t, dir, map[string]string{"release/app.css": "v2!", "release/deep/x.js": "x"})
		app := filepath.Join(root, "assets/app.css")
		deep := filepath.Join(root, "assets/deep/x.js")
		cachedAs(t, l, root, app, "2:v1", true)
		cachedAs(t, l, root, deep, "missing", true)
		bind(t, filepath.Join(dir, "release"), filepath.Join(root, "assets"))
		changed := time.Now()
		seenWithin(t, l, root, app, "3:v2!", changed, "the mount")
		seenWithin(t, l, root, deep, "1:x", changed, "a deep path that was missing")
		unmountLazily(t, filepath.Join(root, "assets"))
		changed = time.Now()
		seenWithin(t, l, root, app, "2:v1", changed, "the unmount")
		seenWithin(t, l, root, deep, "missing", changed, "the unmount of a deep path")
	}},
	{"a file bind-mounted over a cached file, then unmounted", true, func(t *testing.T, dir string, l looker) {
		root := filepath.Join(dir, "www")
		put(t, root, map[string]string{"app.css": "old"})
		put(t, dir, map[string]string{"new/app.css": "newer"})
		app := filepath.Join(root, "app.css")
		cachedAs(t, l, root, app, "3:old", true)
		bind(t, filepath.Join(dir, "new/app.css"), app)
		changed := time.Now()
		seenWithin(t, l, root, app, "5:newer", changed, "the mount")
		// Not lazily: the cache holds the mounted file open until it is
		// idle.
		unmountWithin(t, app, unmountBound)
		changed = time.Now()
		seenWithin(t, l, root, app, "3:old", changed, "the unmount")
	}},
	{"a bind-mounted file written in place", false, func(t *testing.T, dir string, l looker) {
		// docker run -v ./env.js:/srv/www/env.js, a Kubernetes subPath: the
		// source is written in its own directory, which sends the root's
		// no event.
		root := filepath.Join(dir, "www")
		put(t, root, map[string]string{"env.js": ""})
		put(t, dir, map[string]string{"host/env.js": "a=1"})
		env := filepath.Join(root, "env.js")
		bind(t, filepath.Join(dir, "host/env.js"), env)
		cachedAs(t, l, root, env, "3:a=1", false)
		for i, content := range []string{"a=22", "a=333"} {
			changed := time.Now()
			put(t, dir, map[string]string{"host/env.js": content}) // truncated and written: the same inode
			seenWithin(t, l, root, env, fmt.Sprintf("%d:%s", len(content), content), changed, fmt.Sprintf("write %d of the source", i+1))
		}
	}},
	{"a mount at a path the mount table escapes", false, func(t *testing.T, dir string, l looker) {
		root := filepath.Join(dir, "web root\t\\x")
		assets := filepath.Join(root, "assets\ndir")
		put(t, assets, map[string]string{"app.css": "old"})
		put(t, dir, map[string]string{"img/app.css": "new!"})
		app := filepath.Join(assets, "app.css")
		cachedAs(t, l, root, app, "3:old", true)
		bind(t, filepath.Join(dir, "img"), assets)
		changed := time.Now()
		seenWithin(t, l, root, app, "4:new!", changed, "the mount")
	}},
	{"a mount over the root", false, func(t *testing.T, dir string, l looker) {
		root := filepath.Join(dir, "www")
		put(t, root, map[string]string{"index.html": "one", "sub/page.html": "p1"})
		put(t, dir, map[string]string{"next/index.html": "two!", "next/sub/page.html": "p2"})
		index, page := filepath.Join(root, "index.html"), filepath.Join(root, "sub/page.html")
		cachedAs(t, l, root, index, "3:one", true)
		cachedAs(t, l, root, page, "2:p1", true)
		bind(t, filepath.Join(dir, "next"), root)
		changed := time.Now()
		seenWithin(t, l, root, index, "4:two!", changed, "the mount")
		seenWithin(t, l, root, page, "2:p2", changed, "the mount, below")
	}},
	{"a mount over an ancestor of the root", false, func(t *testing.T, dir string, l looker) {
		root := filepath.Join(dir, "site/www")
		put(t, root, map[string]string{"index.html": "one"})
		put(t, dir, map[string]string{"next/www/index.html": "two!"})
		index := filepath.Join(root, "index.html")
		cachedAs(t, l, root, index, "3:one", true)
		bind(t, filepath.Join(dir, "next"), filepath.Join(dir, "site"))
		changed := time.Now()
		seenWithin(t, l, root, index, "4:two!", changed, "the mount")
	}},
	{"a mount under a directory cached as missing", false, func(t *testing.T, dir string, l looker) {
		root := filepath.Join(dir, "www")
		if err := os.MkdirAll(filepath.Join(root, "mnt"), 0o755); err != nil {
			t.Fatal(err)
		}
		put(t, dir, map[string]string{"img/app.js": "js", "img/deep/er/x.js": "xx"})
		app, deep := filepath.Join(root, "mnt/app.js"), filepath.Join(root, "mnt/deep/er/x.js")
		cachedAs(t, l, root, app, "missing", true)
		cachedAs(t, l, root, deep, "missing", true)
		bind(t, filepath.Join(dir, "img"), filepath.Join(root, "mnt"))
		changed := time.Now()
		seenWithin(t, l, root, app, "2:js", changed, "the mount")
		seenWithin(t, l, root, deep, "2:xx", changed, "the mount, a deep path")
	}},
	{"a lazy unmount", false, func(t *testing.T, dir string, l looker) {
		root := filepath.Join(dir, "www")
		put(t, root, map[string]string{"assets/app.css": "below"})
		put(t, dir, map[string]string{"img/app.css": "above"})
		app := filepath.Join(root, "assets/app.css")
		cachedAs(t, l, root, app, "5:below", true)
		bind(t, filepath.Join(dir, "img"), filepath.Join(root, "assets"))
		seenWithin(t, l, root, app, "5:above", time.Now(), "the mount")
		cachedAs(t, l, root, app, "5:above", true)
		unmountLazily(t, filepath.Join(root, "assets"))
		changed := time.Now()
		seenWithin(t, l, root, app, "5:below", changed, "umount -l")
		// The detached mount's descriptor is closed (its entry's drop may
		// finish just after the new entry came): the one left is the new
		// entry's.
		for n := l.openFiles(t); n != 1; n = l.openFiles(t) {
			if time.Since(changed) > mountSeenBound {
				t.Fatalf("%d descriptors held %v after the lazy unmount, want 1 (the new entry's)", n, mountSeenBound)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}},
	{"nested mounts", false, func(t *testing.T, dir string, l looker) {
		root := filepath.Join(dir, "www")
		put(t, root, map[string]string{"assets/app.css": "0", "assets/img/logo.svg": "0"})
		put(t, dir, map[string]string{"a/app.css": "aa", "a/img/logo.svg": "aa", "b/logo.svg": "bbb"})
		app, logo := filepath.Join(root, "assets/app.css"), filepath.Join(root, "assets/img/logo.svg")
		cachedAs(t, l, root, app, "1:0", true)
		cachedAs(t, l, root, logo, "1:0", true)
		bind(t, filepath.Join(dir, "a"), filepath.Join(root, "assets"))
		changed := time.Now()
		seenWithin(t, l, root, app, "2:aa", changed, "the outer mount")
		seenWithin(t, l, root, logo, "2:aa", changed, "the outer mount")
		bind(t, filepath.Join(dir, "b"), filepath.Join(root, "assets/img"))
		seenWithin(t, l, root, logo, "3:bbb", time.Now(), "the inner mount")
		cachedAs(t, l, root, app, "2:aa", true)
		cachedAs(t, l, root, logo, "3:bbb", true)
		unmountLazily(t, filepath.Join(root, "assets/img"))
		changed = time.Now()
		seenWithin(t, l, root, logo, "2:aa", changed, "the inner unmount")
		cachedAs(t, l, root, app, "2:aa", true)
		unmountLazily(t, filepath.Join(root, "assets"))
		changed = time.Now()
		seenWithin(t, l, root, logo, "1:0", changed, "the outer unmount")
		seenWithin(t, l, root, app, "1:0", changed, "the outer unmount")
	}},
	{"a current symlink swapped between mounted releases", false, func(t *testing.T, dir string, l looker) {
		put(t, dir, map[string]string{"img1/app.css": "r1", "img2/app.css": "r22", "img3/app.css": "r333"})
		for _, r := range []string{"releases/v1", "releases/v2"} {
			if err := os.MkdirAll(filepath.Join(dir, r), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		bind(t, filepath.Join(dir, "img1"), filepath.Join(dir, "releases/v1"))
		bind(t, filepath.Join(dir, "img2"), filepath.Join(dir, "releases/v2"))
		if err := os.Symlink("releases/v1", filepath.Join(dir, "current")); err != nil {
			t.Fatal(err)
		}
		root := filepath.Join(dir, "current")
		app := filepath.Join(root, "app.css")
		cachedAs(t, l, root, app, "2:r1", true)
		symlinkSwap(t, dir, "current", "releases/v2")
		changed := time.Now()
		seenWithin(t, l, root, app, "3:r22", changed, "the swap")
		// The old release's descriptors went with the swap.
		unmountWithin(t, filepath.Join(dir, "releases/v1"), unmountBound)
		// A mount over the release current names is seen through the link.
		cachedAs(t, l, root, app, "3:r22", true)
		bind(t, filepath.Join(dir, "img3"), filepath.Join(dir, "releases/v2"))
		changed = time.Now()
		seenWithin(t, l, root, app, "4:r333", changed, "a mount over the link's target")
	}},
	{"umount after requests", true, func(t *testing.T, dir string, l looker) {
		root := filepath.Join(dir, "www")
		assets := filepath.Join(root, "assets")
		if err := os.MkdirAll(assets, 0o755); err != nil {
			t.Fatal(err)
		}
		tmpfsOver(t, assets)
		files := map[string]string{}
		for i := range 20 {
			files[fmt.Sprintf("f%02d.bin", i)] = strings.Repeat("x", 8<<10)
		}
		put(t, assets, files)
		for range 3 {
			for name := range files {
				if got := l.get(t, root, filepath.Join(assets, name)); !strings.HasPrefix(got, "8192:") {
					t.Fatalf("%s: %.20q", name, got)
				}
			}
		}
		if n := l.openFiles(t); n != int64(len(files)) {
			t.Fatalf("%d descriptors held, want %d", n, len(files))
		}
		took := unmountWithin(t, assets, unmountBound)
		t.Logf("umount succeeded %v after the last request", took.Round(time.Millisecond))
	}},
}

// TestMountsSeen: a mount or an unmount under, over or above what a cache
// holds (none of which is an inotify event) is seen within 2 s, not after
// revalidate (an hour here): a tmpfs or a release mounted over a cached
// directory, a file bind-mounted over a cached file, the root or an
// ancestor of it mounted over, a mount where paths were cached as missing,
// a mount over a directory that is listed (its missing names answered
// from its listing) or over an ancestor of one,
// umount -l, nested mounts, mounted releases behind a swapped `current`;
// a file bind mount written in place through its source is seen too; and
// `umount` of a filesystem the cache held descriptors on succeeds within
// 5 s of the last request. Each runs with unconfined and confined
// lookups, in this process (root) and in a process of nobody, which owns
// none of the files (mount(2) needs root: the test mounts, the child
// serves). Needs root.
func TestMountsSeen(t *testing.T) {
	if mode := os.Getenv(mountChildEnv); mode != "" {
		m, err := ParseSymlinks(mode)
		if err != nil {
			t.Fatal(err)
		}
		serveMountLookups(t, m)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("mount(2) needs root")
	}
	bin := mountsTestDir(t)
	for _, user := range []string{"root", "nobody"} {
		for _, mode := range []Symlinks{SymlinksFollow, SymlinksBeneath} {
			t.Run(user+"/"+mode.String(), func(t *testing.T) {
				// The whole matrix takes about 30 s, most of it waiting for
				// unmounts and one-second trust: -short keeps one run of
				// each scenario that waits for neither.
				if testing.Short() && (user != "root" || mode != SymlinksFollow) {
					t.Skip("as nobody and confined: skipped in -short mode; CI runs it")
				}
				var l looker
				if user == "root" {
					local := &localLooker{mode: mode}
					t.Cleanup(func() { local.c.Close() })
					l = local
				} else {
					l = startChildLooker(t, bin, nobody, mode)
				}
				for _, s := range mountScenarios {
					if s.unmounting && mode != SymlinksFollow {
						continue
					}
					if s.unmounting && testing.Short() {
						t.Run(s.name, func(t *testing.T) {
							t.Skip("waits 2 to 4 s for an unmount: skipped in -short mode; CI runs it")
						})
						continue
					}
					t.Run(s.name, func(t *testing.T) {
						l.reset(t)
						s.run(t, mountsTestDir(t), l)
					})
				}
			})
		}
	}
}

// TestMountSeenByEveryCache: caches of different settings live at once
// (one per set of settings), and one cache serves sites of several
// roots: one mount is seen by all, through every root. One watcher of the
// mount table serves the process: one descriptor of it, whatever the
// number of caches, and none, nor its goroutine, once the last is closed.
func TestMountSeenByEveryCache(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mount(2) needs root")
	}
	baseFDs, baseG := mountinfoFDs(t), goroutines()
	dir := mountsTestDir(t)
	put(t, dir, map[string]string{"shared/app.css": "old", "img/app.css": "new!"})
	if err := os.Symlink("shared", filepath.Join(dir, "alias")); err != nil {
		t.Fatal(err)
	}
	caches := []*Cache{New(Options{Revalidate: time.Hour}), New(Options{Revalidate: time.Hour, MemoryBudget: -1})}
	defer func() {
		for _, c := range caches {
			c.Close()
		}
	}()
	if n := mountinfoFDs(t) - baseFDs; n != 1 {
		t.Errorf("%d descriptors of the mount table with two caches, want 1", n)
	}
	type site struct {
		c    *Cache
		root string
	}
	var sites []site
	for _, c := range caches {
		sites = append(sites, site{c, filepath.Join(dir, "shared")}, site{c, filepath.Join(dir, "alias")})
	}
	for _, s := range sites {
		if got := describeConfined(t, s.c, s.root, SymlinksBeneath, filepath.Join(s.root, "app.css")); got != "3:old" {
			t.Fatalf("%s: %q", s.root, got)
		}
	}
	bind(t, filepath.Join(dir, "img"), filepath.Join(dir, "shared"))
	changed := time.Now()
	for i, s := range sites {
		l := &localLooker{c: s.c, mode: SymlinksBeneath}
		seenWithin(t, l, s.root, filepath.Join(s.root, "app.css"), "4:new!", changed, fmt.Sprintf("cache %d, root %s", i/2, filepath.Base(s.root)))
	}
	for _, c := range caches {
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for mountinfoFDs(t) != baseFDs || goroutines() > baseG {
		if time.Now().After(deadline) {
			t.Fatalf("after the last cache closed: %d descriptors of the mount table (%d before), %d goroutines (%d before)",
				mountinfoFDs(t), baseFDs, goroutines(), baseG)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMountWatcherStartsAndStopsCleanly: caches made and closed one after
// another, and a mount change meanwhile, leave no descriptor of the mount
// table and no goroutine behind.
func TestMountWatcherStartsAndStopsCleanly(t *testing.T) {
	baseFDs, baseG := mountinfoFDs(t), goroutines()
	for range 20 {
		c := New(Options{Revalidate: time.Hour})
		if n := mountinfoFDs(t) - baseFDs; n != 1 {
			t.Fatalf("%d descriptors of the mount table with one cache, want 1", n)
		}
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for mountinfoFDs(t) != baseFDs || goroutines() > baseG {
		if time.Now().After(deadline) {
			t.Fatalf("%d descriptors of the mount table (%d before), %d goroutines (%d before)", mountinfoFDs(t), baseFDs, goroutines(), baseG)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c := New(Options{NoInotify: true})
	defer c.Close()
	if n := mountinfoFDs(t) - baseFDs; n != 0 {
		t.Errorf("a cache without inotify (no nodes to drop) watches the mount table: %d descriptors", n)
	}
}

// mountinfoFDs counts this process's descriptors of its mount table.
func mountinfoFDs(t testing.TB) int {
	t.Helper()
	proctest.FDs(t) // skips the test where /proc/self/fd cannot be read
	n := 0
	for _, fd := range proctest.FDTargets() {
		if strings.HasSuffix(fd, "/mountinfo") {
			n++
		}
	}
	return n
}

// goroutines is runtime.NumGoroutine, once the runtime's own short-lived
// ones settled.
func goroutines() int {
	time.Sleep(5 * time.Millisecond)
	return runtime.NumGoroutine()
}
