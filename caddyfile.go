package flashserve

import (
	"path/filepath"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/encode"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/fileserver"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("flash_serve", parseCaddyfile)
	// Ordered just before file_server, so that users never write `order`
	// and a site may keep a file_server fallback after it.
	httpcaddyfile.RegisterDirectiveOrder("flash_serve", httpcaddyfile.Before, "file_server")
}

// parseCaddyfile parses the flash_serve directive.
func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	fsrv := new(FlashServe)
	if err := fsrv.UnmarshalCaddyfile(h.Dispenser); err != nil {
		return nil, err
	}
	// Hide the Caddyfile and what it imports, as file_server does: only the
	// helper knows which files those are.
	for _, file := range h.Caddyfiles() {
		file = filepath.Clean(file)
		if fileHidden(file, fsrv.Hide) {
			continue
		}
		// Without a separator an entry would hide every file of that name.
		if !strings.Contains(file, separator) {
			file = "." + separator + file
		}
		fsrv.Hide = append(fsrv.Hide, file)
	}
	return fsrv, nil
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Its
// subdirectives are spelled as file_server's, so that replacing
// `file_server` with `flash_serve` changes nothing else. Syntax:
//
//	flash_serve [<matcher>] [browse] {
//	    fs            <filesystem>
//	    root          <path>
//	    hide          <files...>
//	    index         <files...>
//	    browse        [<template_file>] {
//	        reveal_symlinks
//	        sort              <options...>
//	        file_limit        <limit>
//	        plain_time_format <layout>
//	    }
//	    precompressed [<formats...>]
//	    status        <status>
//	    disable_canonical_uris
//	    pass_thru
//	    etag_file_extensions <extensions...>
//	    max_ranges    <n>
//	}
//
// `hide` may be repeated and accumulates; any other subdirective given
// twice is an error.
func (fsrv *FlashServe) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume directive name

	args := d.RemainingArgs()
	switch {
	case len(args) == 1 && args[0] == "browse":
		fsrv.Browse = new(fileserver.Browse)
	case len(args) > 0:
		return d.Errf("unexpected argument(s) %q; the only argument allowed is 'browse'", args)
	}

	seen := make(map[string]bool)
	for d.NextBlock(0) {
		sub := d.Val()
		if seen[sub] && sub != "hide" {
			return d.Errf("subdirective '%s' is given more than once", sub)
		}
		seen[sub] = true

		switch sub {
		case "fs":
			if !d.Args(&fsrv.FileSystem) || d.NextArg() {
				return d.Err("fs takes exactly one argument: the name of a file system")
			}

		case "root":
			if !d.Args(&fsrv.Root) || d.NextArg() {
				return d.Err("root takes exactly one argument: a path")
			}

		case "hide":
			hide := d.RemainingArgs()
			if len(hide) == 0 {
				return d.Err("hide needs at least one file or pattern")
			}
			fsrv.Hide = append(fsrv.Hide, hide...)

		case "index":
			fsrv.IndexNames = d.RemainingArgs()
			if len(fsrv.IndexNames) == 0 {
				return d.Err("index needs at least one file name")
			}

		case "browse":
			if fsrv.Browse != nil {
				return d.Err("browsing is already configured")
			}
			if err := unmarshalBrowse(d, fsrv); err != nil {
				return err
			}

		case "precompressed":
			if err := unmarshalPrecompressed(d, fsrv); err != nil {
				return err
			}

		case "status":
			if !d.NextArg() {
				return d.Err("status needs a status code or a placeholder")
			}
			code := d.Val()
			if d.NextArg() {
				return d.Err("status takes exactly one argument")
			}
			if !strings.Contains(code, "{") {
				if n, err := strconv.Atoi(code); err != nil || n < 100 || n > 999 {
					return d.Errf("status: %q is not a status code from 100 to 999", code)
				}
			}
			fsrv.StatusCode = caddyhttp.WeakString(code)

		case "disable_canonical_uris":
			if d.NextArg() {
				return d.ArgErr()
			}
			f := false
			fsrv.CanonicalURIs = &f

		case "pass_thru":
			if d.NextArg() {
				return d.ArgErr()
			}
			fsrv.PassThru = true

		case "etag_file_extensions":
			fsrv.EtagFileExtensions = d.RemainingArgs()
			if len(fsrv.EtagFileExtensions) == 0 {
				return d.Err("etag_file_extensions needs at least one extension")
			}

		case "max_ranges":
			var s string
			if !d.Args(&s) || d.NextArg() {
				return d.Err("max_ranges takes exactly one argument: a number")
			}
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return d.Errf("max_ranges: %q is not a number of 0 or more", s)
			}
			fsrv.MaxRanges = &n

		default:
			return d.Errf("unknown subdirective '%s'", sub)
		}
	}
	return nil
}

// unmarshalBrowse parses the browse subdirective and its block, with
// file_server's syntax.
func unmarshalBrowse(d *caddyfile.Dispenser, fsrv *FlashServe) error {
	b := new(fileserver.Browse)
	d.Args(&b.TemplateFile)
	if d.NextArg() {
		return d.Err("browse takes at most one argument: a template file")
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "reveal_symlinks":
			if b.RevealSymlinks {
				return d.Err("reveal_symlinks is already enabled")
			}
			b.RevealSymlinks = true
		case "sort":
			for d.NextArg() {
				switch opt := d.Val(); opt {
				case "name", "namedirfirst", "size", "time", "asc", "desc":
					b.SortOptions = append(b.SortOptions, opt)
				default:
					return d.Errf("unknown sort option '%s'", opt)
				}
			}
		case "file_limit":
			var s string
			if !d.Args(&s) || d.NextArg() {
				return d.Err("file_limit should have an integer value")
			}
			n, err := strconv.Atoi(s)
			if err != nil {
				return d.Err("file_limit should have an integer value")
			}
			if b.FileLimit != 0 {
				return d.Err("file_limit is already enabled")
			}
			b.FileLimit = n
		case "plain_time_format":
			layout := d.RemainingArgs()
			if len(layout) != 1 || layout[0] == "" {
				return d.Err("plain_time_format takes exactly one non-empty time layout; quote layouts with spaces")
			}
			if b.PlainTimeFormat != "" {
				return d.Err("plain_time_format is already set")
			}
			b.PlainTimeFormat = layout[0]
		default:
			return d.Errf("unknown browse subdirective '%s'", d.Val())
		}
	}
	fsrv.Browse = b
	return nil
}

// unmarshalPrecompressed parses `precompressed [<formats...>]`; without
// formats it means br, zstd and gzip, in that order, as in file_server.
func unmarshalPrecompressed(d *caddyfile.Dispenser, fsrv *FlashServe) error {
	order := d.RemainingArgs()
	if len(order) == 0 {
		order = []string{"br", "zstd", "gzip"}
	}
	for _, format := range order {
		modID := "http.precompressed." + format
		mod, err := caddy.GetModule(modID)
		if err != nil {
			return d.Errf("precompressed: unknown format '%s' (no module %s)", format, modID)
		}
		inst := mod.New()
		pc, ok := inst.(encode.Precompressed)
		if !ok {
			return d.Errf("module %s is not a precompressor; is %T", modID, inst)
		}
		if fsrv.PrecompressedRaw == nil {
			fsrv.PrecompressedRaw = make(caddy.ModuleMap)
		}
		if _, dup := fsrv.PrecompressedRaw[format]; dup {
			return d.Errf("precompressed: format '%s' is listed twice", format)
		}
		fsrv.PrecompressedRaw[format] = caddyconfig.JSON(pc, nil)
	}
	fsrv.PrecompressedOrder = order
	return nil
}

// Interface guards
var _ caddyfile.Unmarshaler = (*FlashServe)(nil)
