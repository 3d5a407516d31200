package flashserve

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// commandParityHeaders are the headers compared between `caddy
// file-server` and `caddy flash-serve`: parityHeaders and those two
// commands' servers set on every answer.
var commandParityHeaders = append([]string{"Accept-Ranges", "Server"}, parityHeaders...)

// TestFlashServeCommandParity runs `caddy file-server` and `caddy
// flash-serve` side by side, as child processes, with the same flags over
// a copy of testdata/site, and compares the status, the headers
// (Content-Encoding included) and the decoded body of each answer, with
// and without Accept-Encoding. --access-log and --debug are compared by
// what the two processes log.
func TestFlashServeCommandParity(t *testing.T) {
	skipIfShort(t, "eighteen Caddy processes")
	root := commandParityTree(t)
	for _, flags := range [][]string{
		nil,
		{"--browse"},
		{"--browse", "--reveal-symlinks", "--file-limit", "2"},
		{"--no-compress"},
		{"--precompressed", "gzip"},
		{"-p", "zstd", "-p", "gzip", "--no-compress"},
		{"--templates"},
		{"--access-log"},
		{"--debug"},
	} {
		t.Run(strings.Join(append([]string{"flags"}, flags...), " "), func(t *testing.T) {
			ports := [2]int{freePort(t), freePort(t)}
			procs := [2]*caddyProcess{}
			for i, command := range []string{"file-server", "flash-serve"} {
				args := append([]string{command, "--root", root, "--listen", fmt.Sprintf("127.0.0.1:%d", ports[i])}, flags...)
				procs[i] = startCaddyCommand(t, command, args)
			}
			c := &http.Client{
				Transport:     &http.Transport{DisableCompression: true},
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
				Timeout:       10 * time.Second,
			}
			t.Cleanup(c.CloseIdleConnections)
			bases := [2]string{}
			for i, port := range ports {
				bases[i] = fmt.Sprintf("http://127.0.0.1:%d", port)
				waitFor(t, procs[i].name+" listening", 60*time.Second, func() bool {
					resp, err := c.Get(bases[i] + "/hello.txt")
					if err == nil {
						resp.Body.Close()
					}
					return err == nil
				})
			}
			statuses, encoded := map[int]int{}, map[string]int{}
			for _, pr := range commandParityRequests(t, c, bases[0]) {
				fs := do(c, bases[0], "", pr)
				fl := do(c, bases[1], "", pr)
				if fs.err != nil || fl.err != nil {
					t.Fatalf("%s: file-server %v, flash-serve %v", pr, fs.err, fl.err)
				}
				if strings.Contains(pr.header.Get("Accept-Encoding"), fl.header.Get("Content-Encoding")) && fl.header.Get("Content-Encoding") != "" {
					encoded[fl.header.Get("Content-Encoding")]++
				}
				statuses[fl.status]++
				// Decoded first: two compressors may cut blocks
				// differently, and a listing's noise is in the text.
				fs, fl = decoded(fs), decoded(fl)
				fs, fl = withoutListingNoise(fs, fl, portOf(bases[0][len("http://"):]), portOf(bases[1][len("http://"):]))
				if diffs := commandDifferences(fs, fl); len(diffs) > 0 {
					t.Errorf("%s:\n\t%s", pr, strings.Join(diffs, "\n\t"))
				}
			}
			t.Logf("flash-serve statuses: %v, Content-Encoding: %v", statuses, encoded)
			// Parity holds if both ignored a flag; these show they did not.
			status, _, body := get(t, c, bases[1]+"/templated.html")
			if rendered := strings.Contains(string(body), "RENDERED at /templated.html"); status != 200 || rendered != slices.Contains(flags, "--templates") {
				t.Errorf("flash-serve: /templated.html is %d %q", status, body)
			}
			status, _, _ = get(t, c, bases[1]+"/docs/")
			if want := map[bool]int{true: 200, false: 404}[slices.Contains(flags, "--browse")]; status != want {
				t.Errorf("flash-serve: /docs/ is %d, want %d", status, want)
			}
			// What each process logged: an access log line per request
			// with --access-log, debug lines with --debug, and neither
			// without them.
			for _, p := range procs {
				p.stop()
			}
			access := func(p *caddyProcess) bool { return logHas(t, p.log, `"logger":"http.log.access`) }
			debug := func(p *caddyProcess) bool { return logHas(t, p.log, `"level":"debug"`) }
			for name, has := range map[string]func(*caddyProcess) bool{"an access log": access, "debug lines": debug} {
				if has(procs[0]) != has(procs[1]) {
					t.Errorf("file-server logged %s: %v; flash-serve: %v", name, has(procs[0]), has(procs[1]))
				}
			}
			for flag, has := range map[string]func(*caddyProcess) bool{"--access-log": access, "--debug": debug} {
				if want := strings.Join(flags, " ") == flag; has(procs[1]) != want {
					t.Errorf("flash-serve with flags %q: logged what %s turns on: %v", flags, flag, has(procs[1]))
				}
			}
		})
	}
}

// commandParityTree copies testdata/site to a temporary directory and adds
// what the flags need to show: files large enough to be compressed
// (encode's minimum is 512 bytes), gzip and zstd sidecars, a template and
// a symbolic link for listings.
func commandParityTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	err := filepath.WalkDir("testdata/site", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("testdata/site", p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(root, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(root, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	var big bytes.Buffer
	for i := range 2000 {
		fmt.Fprintf(&big, "line %d of a text large enough to be compressed\n", i)
	}
	write := func(rel string, b []byte) {
		if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(rel)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("big.txt", big.Bytes())
	write("docs/page.html", []byte("<!doctype html><p>"+strings.Repeat("A page with enough words to compress. ", 40)+"</p>\n"))
	write("templated.html", []byte(`<!doctype html><p>{{"rendered" | upper}} at {{.OriginalReq.URL.Path}}</p>`+"\n"))
	for _, rel := range []string{"big.txt", "hello.txt"} {
		content, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write(content)
		zw.Close()
		write(rel+".gz", gz.Bytes())
		enc, err := zstd.NewWriter(nil)
		if err != nil {
			t.Fatal(err)
		}
		write(rel+".zst", enc.EncodeAll(content, nil))
		enc.Close()
	}
	// Best effort: where links cannot be made, listings have none.
	_ = os.Symlink("hello.txt", filepath.Join(root, "docs", "link.txt"))
	return root
}

// commandParityRequests are the requests both commands answer: each link
// of the sample page, files, directories with and without an index, a
// missing path, ranges, HEAD and a conditional request, each with no
// Accept-Encoding, gzip, zstd and both. The ETag of the conditional one
// is file-server's.
func commandParityRequests(t *testing.T, c *http.Client, fileServer string) []parityRequest {
	t.Helper()
	targets := []string{"/", "/index.html", "/docs", "/docs/", "/missing", "/docs/missing.txt", "/big.txt", "/templated.html", "/docs/page.html"}
	// Every link of the sample page, which must also work without --browse
	// (TestSamplePageLinksWork).
	for _, link := range sampleLinks(t) {
		targets = append(targets, "/"+link)
	}
	var etag string
	if resp, err := c.Head(fileServer + "/big.txt"); err == nil {
		etag = resp.Header.Get("Etag")
		resp.Body.Close()
	}
	var out []parityRequest
	for _, ae := range []string{"", "gzip", "zstd", "gzip, zstd"} {
		h := func(kv ...string) http.Header {
			hdr := http.Header{}
			if ae != "" {
				hdr.Set("Accept-Encoding", ae)
			}
			for i := 0; i+1 < len(kv); i += 2 {
				hdr.Set(kv[i], kv[i+1])
			}
			return hdr
		}
		for _, target := range targets {
			out = append(out, parityRequest{method: http.MethodGet, target: target, header: h()})
		}
		out = append(out,
			parityRequest{method: http.MethodHead, target: "/big.txt", header: h()},
			parityRequest{method: http.MethodGet, target: "/big.txt", header: h("Range", "bytes=100-199")},
			parityRequest{method: http.MethodGet, target: "/hello.txt", header: h("Range", "bytes=0-4,10-12")},
			parityRequest{method: http.MethodGet, target: "/hello.txt", header: h("Range", "bytes=9999-")},
			parityRequest{method: http.MethodGet, target: "/big.txt", header: h("If-None-Match", etag)},
		)
	}
	return out
}

// sampleLinks returns the href of each link of testdata/site/index.html.
func sampleLinks(t *testing.T) []string {
	t.Helper()
	page, err := os.ReadFile("testdata/site/index.html")
	if err != nil {
		t.Fatal(err)
	}
	var links []string
	for _, part := range strings.Split(string(page), `href="`)[1:] {
		link, _, _ := strings.Cut(part, `"`)
		links = append(links, link)
	}
	if len(links) == 0 {
		t.Fatal("the sample page has no links")
	}
	return links
}

// commandDifferences lists how flash-serve's answer differs from
// file-server's: status, headers and (decoded) body.
func commandDifferences(fs, fl parityResponse) []string {
	var diffs []string
	if fs.err != nil || fl.err != nil {
		return []string{fmt.Sprintf("error: file-server %v, flash-serve %v", fs.err, fl.err)}
	}
	if fs.status != fl.status {
		diffs = append(diffs, fmt.Sprintf("status: file-server %d, flash-serve %d", fs.status, fl.status))
	}
	nfs, nfl := fs.normalised(), fl.normalised()
	for _, k := range commandParityHeaders {
		a, b := strings.Join(nfs.header.Values(k), ", "), strings.Join(nfl.header.Values(k), ", ")
		if a != b {
			diffs = append(diffs, fmt.Sprintf("%s: file-server %q, flash-serve %q", k, a, b))
		}
	}
	if !bytes.Equal(nfs.body, nfl.body) {
		diffs = append(diffs, fmt.Sprintf("body (decoded): file-server %d bytes, flash-serve %d bytes", len(nfs.body), len(nfl.body)))
	}
	return diffs
}

// decoded returns a 200 response with its body decoded as its
// Content-Encoding says (the header stays, to be compared), or with err
// set if it does not decode. Other answers are returned as they are: a
// 206 of a sidecar holds a part of its compressed bytes.
func decoded(r parityResponse) parityResponse {
	if r.err != nil || r.status != http.StatusOK || len(r.body) == 0 {
		return r
	}
	switch ce := r.header.Get("Content-Encoding"); ce {
	case "":
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(r.body))
		if err == nil {
			r.body, err = io.ReadAll(zr)
		}
		r.err = err
	case "zstd":
		d, err := zstd.NewReader(nil)
		if err == nil {
			r.body, err = d.DecodeAll(r.body, nil)
			d.Close()
		}
		r.err = err
	default:
		r.err = fmt.Errorf("unknown Content-Encoding %q", ce)
	}
	return r
}

// logHas reports whether a line of the log file contains s.
func logHas(t *testing.T, file, s string) bool {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			return true
		}
	}
	return false
}

// TestSamplePageLinksWork: the README's no-config command, `caddy
// flash-serve --root testdata/site` with no other flag, answers every link
// of the sample page with 200 and the linked file.
func TestSamplePageLinksWork(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	run, err := commandConfig(commandOptions{root: "testdata/site", listen: addr, fileLimit: fileLimitDefault})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := json.Marshal(run.Config)
	if err != nil {
		t.Fatal(err)
	}
	loadConfig(t, cfg)
	c := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(c.CloseIdleConnections)
	for _, link := range append([]string{""}, sampleLinks(t)...) {
		status, _, body := get(t, c, "http://"+addr+"/"+link)
		if status != 200 {
			t.Errorf("/%s: %d", link, status)
			continue
		}
		file := link
		if file == "" {
			file = "index.html"
		}
		want, err := os.ReadFile(filepath.Join("testdata/site", filepath.FromSlash(file)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(body, want) {
			t.Errorf("/%s: %d bytes; want the %d bytes of the file", link, len(body), len(want))
		}
	}
}
