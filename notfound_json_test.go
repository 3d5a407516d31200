package flashserve

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
)

// TestQuietNotFoundJSONErrorPaths: JSON configurations in which Caddy
// does something with a handler's 404 error although neither the server
// nor any subroute on quietNotFound's walk from the server's routes to the
// handler has error routes, so a 404 written by the handler itself is not
// file_server's. Each case has three servers: file_server, and two
// flash_serve handlers (which share one cache); each flash_serve server
// is asked twice, and every answer must be file_server's (status, every
// header but Date, body).
func TestQuietNotFoundJSONErrorPaths(t *testing.T) {
	root := t.TempDir()
	for _, tc := range []struct {
		name string
		// handle is the server's route, given the file handler's route
		// (the root, then file_server or flash_serve).
		handle func(file []any) []any
		// named puts the file handler's route in the server's named
		// route "nf" instead.
		named bool
	}{
		{
			// Subroute.ServeHTTP runs its error routes whenever Errors is
			// set: an empty list compiles to next, so file_server's 404
			// carries on, with the error in the request's context, to the
			// handler after the subroute, which answers with the error's
			// status and its own body.
			name: "subroute with an empty errors object, then a handler",
			handle: func(file []any) []any {
				return []any{
					map[string]any{"handler": "subroute", "routes": []any{map[string]any{"handle": file}}, "errors": map[string]any{}},
					map[string]any{"handler": "static_response", "body": "after the subroute {http.error.status_code}"},
				}
			},
		},
		{
			// The same with nothing after the subroute: its empty error
			// routes are the end of the chain, which writes nothing and
			// returns nil, so file_server's 404 becomes net/http's 200.
			name: "subroute with empty error routes, last",
			handle: func(file []any) []any {
				return []any{map[string]any{"handler": "subroute", "routes": []any{map[string]any{"handle": file}}, "errors": map[string]any{"routes": []any{}}}}
			},
		},
		{
			// The walk finds the handler in the server's named routes, but
			// the named route is invoked from inside a subroute whose
			// error routes catch file_server's 404.
			name:  "named route invoked inside a subroute with error routes",
			named: true,
			handle: func([]any) []any {
				return []any{map[string]any{
					"handler": "subroute",
					"routes":  []any{map[string]any{"handle": []any{map[string]any{"handler": "invoke", "name": "nf"}}}},
					"errors": map[string]any{"routes": []any{map[string]any{"handle": []any{map[string]any{
						"handler": "static_response", "status_code": 410, "body": "caught {http.error.status_code}",
					}}}}},
				}}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			servers := map[string]any{}
			var bases []string
			for i, handler := range []string{"file_server", "flash_serve", "flash_serve"} {
				file := []any{map[string]any{"handler": "vars", "root": root}, map[string]any{"handler": handler}}
				addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
				srv := map[string]any{
					"listen":          []string{addr},
					"automatic_https": map[string]any{"disable": true},
					"routes":          []any{map[string]any{"handle": tc.handle(file)}},
				}
				if tc.named {
					srv["named_routes"] = map[string]any{"nf": map[string]any{"handle": file}}
				}
				servers[fmt.Sprintf("srv%d", i)] = srv
				bases = append(bases, "http://"+addr)
			}
			raw, err := json.Marshal(map[string]any{
				"admin":   map[string]any{"disabled": true},
				"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}},
				"apps":    map[string]any{"http": map[string]any{"servers": servers}},
			})
			if err != nil {
				t.Fatal(err)
			}
			loadConfig(t, raw)
			c := newClients(t).h1
			ask := func(base string) parityResponse {
				r := do(c, base, "", parityRequest{method: "GET", target: "/missing.txt"})
				if r.err != nil {
					t.Fatal(r.err)
				}
				delete(r.header, "Date")
				return r
			}
			want := ask(bases[0])
			t.Logf("file_server: %d %v %q", want.status, want.header, want.body)
			for _, base := range []string{bases[1], bases[1], bases[2], bases[2]} {
				got := ask(base)
				if got.status != want.status || !maps.EqualFunc(got.header, want.header, slices.Equal) || string(got.body) != string(want.body) {
					t.Errorf("%s: %d %v %q; file_server: %d %v %q", base, got.status, got.header, got.body, want.status, want.header, want.body)
				}
			}
		})
	}
}
