package flashserve

import (
	"runtime/debug"
	"testing"
)

// TestModuleVersion: the version --version reports is the one of the Go
// module that holds the package, as list-modules finds a plugin's, and
// says so honestly when it is a replacement, a build without VCS
// information or not known at all.
func TestModuleVersion(t *testing.T) {
	const pkg = "github.com/flashserve/caddy-flash-serve"
	caddyDep := &debug.Module{Path: "github.com/caddyserver/caddy/v2", Version: "v2.11.9"}
	for _, c := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"built by xcaddy from a tag", &debug.BuildInfo{Main: debug.Module{Path: "caddy"},
			Deps: []*debug.Module{caddyDep, {Path: pkg, Version: "v1.4.2"}}}, "v1.4.2"},
		{"a longer module path wins, as a nested module's", &debug.BuildInfo{Main: debug.Module{Path: "caddy"},
			Deps: []*debug.Module{{Path: "github.com/flashserve", Version: "v9.9.9"}, {Path: pkg, Version: "v1.4.2"}}}, "v1.4.2"},
		{"a module whose path only starts the same holds nothing", &debug.BuildInfo{Main: debug.Module{Path: "caddy"},
			Deps: []*debug.Module{{Path: "github.com/flashserve/caddy-flash", Version: "v9.9.9"}}}, "unknown"},
		{"xcaddy --with module=./dir", &debug.BuildInfo{Main: debug.Module{Path: "caddy"},
			Deps: []*debug.Module{{Path: pkg, Version: "v0.0.0", Replace: &debug.Module{Path: "/src/caddy-flash-serve"}}}},
			"v0.0.0 (replaced by /src/caddy-flash-serve)"},
		{"replaced by another version", &debug.BuildInfo{Main: debug.Module{Path: "caddy"},
			Deps: []*debug.Module{{Path: pkg, Version: "v1.0.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v1.0.1"}}}},
			"v1.0.0 (replaced by example.com/fork v1.0.1)"},
		{"go build ./xcaddy in a tagged checkout", &debug.BuildInfo{Main: debug.Module{Path: pkg, Version: "v1.4.2"},
			Deps: []*debug.Module{caddyDep}}, "v1.4.2"},
		{"go build ./xcaddy between tags", &debug.BuildInfo{Main: debug.Module{Path: pkg, Version: "v1.4.3-0.20260101120000-abcdef123456+dirty"}},
			"v1.4.3-0.20260101120000-abcdef123456+dirty"},
		{"no VCS information", &debug.BuildInfo{Main: debug.Module{Path: pkg, Version: "(devel)"}}, "(devel)"},
		{"main module without a version", &debug.BuildInfo{Main: debug.Module{Path: pkg}}, "unknown"},
		{"not in the binary", &debug.BuildInfo{Main: debug.Module{Path: "caddy"}, Deps: []*debug.Module{caddyDep}}, "unknown"},
		{"no build info", nil, "unknown"},
	} {
		if got := moduleVersion(c.bi, pkg); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
	// A package below the module root is held by it.
	bi := &debug.BuildInfo{Deps: []*debug.Module{{Path: pkg, Version: "v1.4.2"}}}
	if got := moduleVersion(bi, pkg+"/statacc"); got != "v1.4.2" {
		t.Errorf("subpackage: got %q", got)
	}
}
