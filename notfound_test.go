package flashserve

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestQuietNotFound checks where a 404 is written by the handler itself
// and where it goes through Caddy's error path, as file_server's does: in
// every configuration the 404 must be file_server's (status, every header
// but Date, body), sent twice to a site and once to a second site sharing
// its cache, and the handler writes it only where the case says nothing
// could see the difference.
func TestQuietNotFound(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "here.txt"), []byte("here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	errPages := filepath.Join(root, "errors")
	if err := os.Mkdir(errPages, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		globals string
		lines   []string // the site's lines before the handler
		// errorSite adds a second site on the same server (same port,
		// another host) that has handle_errors.
		errorSite bool
		quiet     bool
	}{
		{name: "bare site", quiet: true},
		{name: "header set at once", lines: []string{`header X-Set "one"`, `header +X-Add "a"`}, quiet: true},
		{name: "header delete (deferred by Caddy)", lines: []string{`header -Server`}},
		{name: "rewrite and vars", lines: []string{`rewrite /alias.txt /missing.txt`, `vars x y`}, quiet: true},
		{name: "header deferred", lines: []string{`header >X-Deferred "d"`}},
		{name: "header with defer", lines: []string{"header {\n\tdefer\n\tX-Later \"l\"\n}"}},
		{name: "encode", lines: []string{"encode gzip"}},
		{name: "handle_errors", lines: []string{"handle_errors {\n\theader X-Caught {err.status_code}\n\trespond \"caught {err.status_code}\" {err.status_code}\n}"}},
		{name: "handle_errors on another site of the server", errorSite: true},
		{name: "error pages served by the handler", lines: []string{"handle_errors {\n\troot * " + errPages + "\n\t{serve}\n}"}},
		{name: "access log", lines: []string{"log {\n\toutput discard\n}"}},
		{name: "metrics", globals: "metrics"},
		{name: "debug log", globals: "log {\n\toutput file {log}\n\tlevel DEBUG\n}"},
		{name: "a debug log of the errors only", globals: "log errors {\n\toutput file {log}\n\tlevel DEBUG\n\tinclude http.log.error\n}"},
		{name: "a debug log of something else", globals: "log other {\n\toutput file {log}\n\tlevel DEBUG\n\tinclude tls\n}", quiet: true},
		{name: "a debug log that discards", globals: "log {\n\toutput discard\n\tlevel DEBUG\n}", quiet: true},
		{name: "templates", lines: []string{"templates"}},
		{name: "intercept", lines: []string{"intercept {\n\t@nf status 404\n\thandle_response @nf {\n\t\trespond \"intercepted\" 410\n\t}\n}"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sites string
			ports := map[string][]int{}
			for _, handler := range []string{"flash_serve", "flash_serve", "file_server"} {
				port := freePort(t)
				ports[handler] = append(ports[handler], port)
				lines := slices.Clone(tc.lines)
				for i, l := range lines {
					lines[i] = strings.ReplaceAll(l, "{serve}", handler)
				}
				sites += siteBlock(port, root, append(lines, handler)...)
				if tc.errorSite {
					sites += siteAt(fmt.Sprintf("http://localhost:%d", port), "",
						"handle_errors {\n\trespond \"other site caught {err.status_code}\" 418\n}", "error 404")
				}
			}
			logFile := filepath.Join(t.TempDir(), "debug.log")
			loadSites(t, strings.ReplaceAll(tc.globals, "{log}", logFile), sites)
			c := newClients(t).h1
			want := func() (int, http.Header, []byte) {
				return get(t, c, fmt.Sprintf("http://127.0.0.1:%d/missing.txt", ports["file_server"][0]))
			}
			wantStatus, wantHeader, wantBody := want()
			delete(wantHeader, "Date")
			before := counters.quiet404.Load()
			for _, port := range []int{ports["flash_serve"][0], ports["flash_serve"][0], ports["flash_serve"][1]} {
				status, header, body := get(t, c, fmt.Sprintf("http://127.0.0.1:%d/missing.txt", port))
				delete(header, "Date")
				if status != wantStatus || !maps.EqualFunc(header, wantHeader, slices.Equal) || string(body) != string(wantBody) {
					t.Errorf("port %d: %d %v %q; file_server: %d %v %q", port, status, header, body, wantStatus, wantHeader, wantBody)
				}
			}
			wrote := counters.quiet404.Load() - before
			if tc.quiet && wrote != 3 || !tc.quiet && wrote != 0 {
				t.Errorf("the handler wrote %d of the 3 404s itself; want %v", wrote, map[bool]int{true: 3, false: 0}[tc.quiet])
			}
			// Where a debug log is written, it has every 404's entry, as
			// file_server's: Caddy's error log line, with the error's trace.
			if strings.Contains(tc.globals, "{log}") && !tc.quiet {
				logged, _ := os.ReadFile(logFile)
				if n := strings.Count(string(logged), `"err_trace":"caddy-flash-serve.fileNotFound`); n != 3 {
					t.Errorf("the debug log has %d entries of flash_serve 404s, want 3:\n%s", n, logged)
				}
			}
			// A file is served as before, and the 404s it followed left nothing.
			if status, _, body := get(t, c, fmt.Sprintf("http://127.0.0.1:%d/here.txt", ports["flash_serve"][1])); status != 200 || string(body) != "here\n" {
				t.Errorf("here.txt: %d %q", status, body)
			}
		})
	}
}
