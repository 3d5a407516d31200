package flashserve

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// Fuzz targets; CI runs each for a few seconds (see .ci/run):
//	go test -run XXX -fuzz FuzzRanges -fuzztime 10s .

// FuzzRanges checks that ranges stay inside the file, that limitRanges
// leaves them sorted and disjoint, and that the multipart body built from
// them parses back to the same bytes.
func FuzzRanges(f *testing.F) {
	for _, s := range []string{"bytes=0-0", "bytes=-5", "bytes=10-", "bytes=0-9,5-15", "bytes=20-29,0-9", "bytes=-0",
		"bytes= 1-2 , 4-5", "bytes=5-1", "items=0-1", "bytes=0-,0-", "bytes=,", "bytes=99999999999999999999-"} {
		f.Add(s, int64(100))
		f.Add(s, int64(0))
	}
	f.Fuzz(func(t *testing.T, header string, size int64) {
		if size < 0 || size > 1<<20 {
			return
		}
		ranges, err := parseRange(header, size, nil)
		if err != nil {
			return
		}
		for _, r := range ranges {
			if r.start < 0 || r.length <= 0 || r.end() > size {
				t.Fatalf("%q on %d bytes: range %+v outside the file", header, size, r)
			}
		}
		limited, ok := limitRanges(ranges, size, defaultMaxRanges)
		if !ok {
			return
		}
		for i, r := range limited {
			if r.start < 0 || r.length <= 0 || r.end() > size {
				t.Fatalf("limited range %+v outside the file", r)
			}
			if i > 0 && r.start < limited[i-1].end() {
				t.Fatalf("limited ranges overlap or are out of order: %+v", limited)
			}
		}
		if len(limited) < 2 {
			return
		}
		content := make([]byte, size)
		for i := range content {
			content[i] = byte(i * 7)
		}
		const boundary = "fuzzboundary0123456789"
		var body bytes.Buffer
		var hdr [256]byte
		for i, r := range limited {
			body.Write(appendPartHeader(hdr[:0], i, r, boundary, "text/plain", size))
			body.Write(content[r.start:r.end()])
		}
		body.Write(appendMultipartEnd(hdr[:0], boundary))
		if int64(body.Len()) != multipartLength(limited, boundary, "text/plain", size) {
			t.Fatalf("multipartLength %d, body %d", multipartLength(limited, boundary, "text/plain", size), body.Len())
		}
		mr := multipart.NewReader(&body, boundary)
		for i := 0; ; i++ {
			part, err := mr.NextPart()
			if err == io.EOF {
				if i != len(limited) {
					t.Fatalf("%d parts parsed, %d written", i, len(limited))
				}
				return
			}
			if err != nil {
				t.Fatalf("multipart does not parse: %v", err)
			}
			got, _ := io.ReadAll(part)
			r := limited[i]
			if !bytes.Equal(got, content[r.start:r.end()]) || part.Header.Get("Content-Range") != r.contentRange(size) {
				t.Fatalf("part %d does not parse back to its bytes", i)
			}
		}
	})
}

// FuzzPreconditions checks that the evaluator never panics and never
// answers 304 to a method other than GET and HEAD (RFC 9110 §13.1.2).
func FuzzPreconditions(f *testing.F) {
	f.Add("GET", `"a"`, `W/"a"`, "Mon, 02 Jan 2006 15:04:05 GMT", "", `"a"`, "bytes=0-1")
	f.Add("POST", "*", "*", "garbage", "Mon, 02 Jan 2006 15:04:05 GMT", "x", "")
	f.Fuzz(func(t *testing.T, method, im, inm, ims, ius, ir, rg string) {
		h := http.Header{}
		for k, v := range map[string]string{"If-Match": im, "If-None-Match": inm, "If-Modified-Since": ims,
			"If-Unmodified-Since": ius, "If-Range": ir, "Range": rg} {
			if v != "" {
				h[k] = []string{v}
			}
		}
		got, rangeHeader := checkPreconditions(h, method, validators{etag: `"a"`, modTime: time.Unix(1136214245, 0)})
		if got == notModified && method != http.MethodGet && method != http.MethodHead {
			t.Fatalf("304 for %s", method)
		}
		if rangeHeader != "" && rangeHeader != rg {
			t.Fatalf("range header %q is not the request's %q", rangeHeader, rg)
		}
	})
}

// FuzzJoinRequestPath checks that the fast path maps a request path
// exactly as file_server does, and never outside the root.
func FuzzJoinRequestPath(f *testing.F) {
	for _, p := range []string{"/", "/a/b.txt", "/a//b", "/a/./b", "/../etc/passwd", "/a/b/", "//x", "/\x00", "/a/..", "/..."} {
		f.Add(p)
	}
	const root = "/srv/www"
	f.Fuzz(func(t *testing.T, reqPath string) {
		got := joinRequestPath(root, reqPath)
		want := strings.TrimSuffix(caddyhttp.SanitizedPathJoin(root, reqPath), "/")
		if got != want {
			t.Fatalf("joinRequestPath(%q) = %q, file_server's join gives %q", reqPath, got, want)
		}
		if rel, err := filepath.Rel(root, got); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			t.Fatalf("%q maps outside the root: %q", reqPath, got)
		}
	})
}

// FuzzCaddyfile checks that no input makes the directive's parser panic,
// and that what it accepts survives the trip to JSON and back unchanged,
// as a config adapted from a Caddyfile must.
func FuzzCaddyfile(f *testing.F) {
	f.Add("flash_serve browse {\n root /srv\n max_ranges 4\n memory_cache 1MiB max_file 1KiB\n}")
	f.Add("flash_serve {\n precompressed\n prewarm *\n keep_hot 1m\n}")
	f.Fuzz(func(t *testing.T, input string) {
		// Tokenized here, not with NewTestDispenser, which exits the
		// process on input the lexer refuses (an unterminated heredoc):
		// Caddy's adapter reports such input before any directive sees it.
		tokens, err := caddyfile.Tokenize([]byte(input), "Caddyfile")
		if err != nil {
			return
		}
		fsrv := new(FlashServe)
		if fsrv.UnmarshalCaddyfile(caddyfile.NewDispenser(tokens)) != nil {
			return
		}
		first, err := json.Marshal(fsrv)
		if err != nil {
			t.Fatalf("%q parsed but does not marshal: %v", input, err)
		}
		var back FlashServe
		if err := json.Unmarshal(first, &back); err != nil {
			t.Fatalf("%q: its JSON %s does not unmarshal: %v", input, first, err)
		}
		second, _ := json.Marshal(&back)
		if !bytes.Equal(first, second) {
			t.Fatalf("%q: JSON changes on the way back:\n%s\n%s", input, first, second)
		}
	})
}
