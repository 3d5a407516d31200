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

// moduleVersion returns the version of the Go module that holds pkg, found
// as `caddy list-modules --versions` finds a plugin's: the dependency with
// the longest path prefix of pkg, with its replacement if any; else the
// main module's (built from this repository: a tag, a pseudo-version or
// "(devel)"); "unknown" without build info or such a module.
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
