package flashserve

import (
	"fmt"
	"io"
	"reflect"
	"runtime/debug"
	"strings"

	"github.com/caddyserver/caddy/v2"
)

// printVersions prints what `caddy flash-serve --version` says: the
// version of the flash_serve Go module in this binary, then Caddy's.
func printVersions(w io.Writer) {
	bi, _ := debug.ReadBuildInfo()
	pkg := reflect.TypeFor[FlashServe]().PkgPath()
	_, caddyVersion := caddy.Version()
	fmt.Fprintf(w, "flash_serve %s (%s)\nCaddy %s\n", moduleVersion(bi, pkg), pkg, caddyVersion)
}

// moduleVersion returns the version of the Go module that holds the
// package pkg in a binary with build info bi, found as `caddy list-modules
// --versions` finds a plugin's: the dependency whose path is the longest
// prefix of pkg. That is the tag's version when xcaddy builds from a tag;
// a replaced module (xcaddy's --with module=./dir) says so, since its
// version is then only the one required. Built from this repository, the
// module is the main module, not a dependency (list-modules shows no
// version then): its version is what the go command stamped, a tag or a
// pseudo-version from the checkout, or "(devel)" without VCS information.
// It is "unknown" without build info or when no module holds pkg.
func moduleVersion(bi *debug.BuildInfo, pkg string) string {
	if bi == nil {
		return "unknown"
	}
	var found *debug.Module
	for _, dep := range bi.Deps {
		if moduleHolds(dep.Path, pkg) && (found == nil || len(dep.Path) > len(found.Path)) {
			found = dep
		}
	}
	if found == nil && moduleHolds(bi.Main.Path, pkg) {
		found = &bi.Main
	}
	if found == nil {
		return "unknown"
	}
	v := found.Version
	if v == "" {
		v = "unknown"
	}
	if r := found.Replace; r != nil {
		to := r.Path
		if r.Version != "" {
			to += " " + r.Version
		}
		v += " (replaced by " + to + ")"
	}
	return v
}

// moduleHolds reports whether the Go module at modPath holds package pkg.
func moduleHolds(modPath, pkg string) bool {
	return modPath != "" && (pkg == modPath || strings.HasPrefix(pkg, modPath+"/"))
}
