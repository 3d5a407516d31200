package flashserve

import (
	"net/http"
	"testing"
	"time"
)

func TestCheckPreconditions(t *testing.T) {
	mod := time.Date(2025, 3, 4, 5, 6, 7, 500_000_000, time.UTC)
	v := validators{etag: `"abc-1"`, modTime: mod}
	at := func(d time.Duration) string { return mod.Add(d).Format(http.TimeFormat) }
	tests := []struct {
		name      string
		method    string
		header    map[string]string
		want      precondition
		wantRange string
	}{
		{"none", "GET", nil, proceed, ""},
		{"If-Match strong hit (RFC 9110 §13.1.1)", "GET", map[string]string{"If-Match": `"abc-1"`}, proceed, ""},
		{"If-Match weak tag never matches (§13.1.1 strong comparison)", "GET", map[string]string{"If-Match": `W/"abc-1"`}, preconditionFailed, ""},
		{"If-Match miss", "GET", map[string]string{"If-Match": `"x", "y"`}, preconditionFailed, ""},
		{"If-Match star", "GET", map[string]string{"If-Match": "*"}, proceed, ""},
		{"If-Match wins over If-Unmodified-Since (§13.2.2 step 2)", "GET", map[string]string{"If-Match": `"abc-1"`, "If-Unmodified-Since": at(-time.Hour)}, proceed, ""},
		{"If-Unmodified-Since past fails (§13.1.4)", "GET", map[string]string{"If-Unmodified-Since": at(-time.Hour)}, preconditionFailed, ""},
		{"If-Unmodified-Since same second holds", "GET", map[string]string{"If-Unmodified-Since": at(0)}, proceed, ""},
		{"If-Unmodified-Since malformed is ignored (§13.1.4)", "GET", map[string]string{"If-Unmodified-Since": "soon"}, proceed, ""},
		{"If-None-Match weak hit gives 304 (§13.1.2)", "GET", map[string]string{"If-None-Match": `W/"abc-1"`}, notModified, ""},
		{"If-None-Match in a list", "HEAD", map[string]string{"If-None-Match": `"x", "abc-1"`}, notModified, ""},
		{"If-None-Match star", "GET", map[string]string{"If-None-Match": "*"}, notModified, ""},
		{"If-None-Match hit on POST gives 412 (§13.1.2)", "POST", map[string]string{"If-None-Match": `"abc-1"`}, preconditionFailed, ""},
		{"If-None-Match miss ignores If-Modified-Since (§13.2.2 step 4)", "GET", map[string]string{"If-None-Match": `"x"`, "If-Modified-Since": at(time.Hour)}, proceed, ""},
		{"If-Modified-Since after gives 304 (§13.1.3)", "GET", map[string]string{"If-Modified-Since": at(time.Hour)}, notModified, ""},
		{"If-Modified-Since same second gives 304", "GET", map[string]string{"If-Modified-Since": at(0)}, notModified, ""},
		{"If-Modified-Since before proceeds", "GET", map[string]string{"If-Modified-Since": at(-time.Hour)}, proceed, ""},
		{"If-Modified-Since ignored on POST (§13.1.3)", "POST", map[string]string{"If-Modified-Since": at(time.Hour)}, proceed, ""},
		{"If-Range etag hit keeps Range (§13.1.5)", "GET", map[string]string{"If-Range": `"abc-1"`, "Range": "bytes=0-1"}, proceed, "bytes=0-1"},
		{"If-Range weak tag drops Range (§13.1.5)", "GET", map[string]string{"If-Range": `W/"abc-1"`, "Range": "bytes=0-1"}, proceed, ""},
		{"If-Range date hit keeps Range", "GET", map[string]string{"If-Range": at(0), "Range": "bytes=0-1"}, proceed, "bytes=0-1"},
		{"If-Range other date drops Range", "GET", map[string]string{"If-Range": at(-time.Hour), "Range": "bytes=0-1"}, proceed, ""},
		{"If-Range garbage drops Range", "GET", map[string]string{"If-Range": "nope", "Range": "bytes=0-1"}, proceed, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, val := range tt.header {
				h.Set(k, val)
			}
			got, rng := checkPreconditions(h, tt.method, v)
			if got != tt.want || rng != tt.wantRange {
				t.Fatalf("checkPreconditions = %v, %q; want %v, %q", got, rng, tt.want, tt.wantRange)
			}
		})
	}
}

func TestCheckPreconditionsWithoutModTime(t *testing.T) {
	// A file whose mtime says nothing has no Last-Modified, so date
	// conditions cannot be evaluated and are ignored; an If-Range date can
	// never match.
	v := validators{etag: `"e"`}
	h := http.Header{"If-Modified-Since": {time.Now().Format(http.TimeFormat)}}
	if got, _ := checkPreconditions(h, "GET", v); got != proceed {
		t.Fatalf("If-Modified-Since without a modtime = %v, want proceed", got)
	}
	h = http.Header{"If-Range": {time.Now().Format(http.TimeFormat)}, "Range": {"bytes=0-0"}}
	if _, rng := checkPreconditions(h, "GET", v); rng != "" {
		t.Fatalf("If-Range date without a modtime kept Range %q", rng)
	}
}

func TestScanETag(t *testing.T) {
	for in, want := range map[string]string{
		`"a"`:      `"a"`,
		`W/"a", x`: `W/"a"`,
		`  "a b"`:  "",
		`"a`:       "",
		`a`:        "",
		`""`:       `""`,
	} {
		if got, _ := scanETag(in); got != want {
			t.Errorf("scanETag(%q) = %q, want %q", in, got, want)
		}
	}
}
