package flashserve

import (
	"path/filepath"

	"github.com/dustin/go-humanize"
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
//	    stat_workers  <n>
//	    revalidate    <duration>
//	    inotify       on|off
//	    max_open_files <n>
//	    negative_cache <n>
//	    max_watches   <n>
//	    max_dir_entries <n>
//	    memory_cache  <budget> [max_file <size>]
//	    transmit      auto|sendfile|io_uring|copy
//	    sendfile_max_chunk <size>
//	    prewarm       <paths or globs...>
//	    prewarm_budget <size>
//	    prewarm_workers <n>
//	    keep_hot      <interval>
//	    symlinks      follow|deny|beneath
//	    max_transfers <n> [queue <duration>]
//	    limit_rate    <bytes/s> [after <size>]
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
			n, err := intArg(d, sub)
			if err != nil {
				return err
			}
			fsrv.MaxRanges = &n

		case "negative_cache":
			n, err := intArg(d, sub)
			if err != nil {
				return err
			}
			fsrv.NegativeCache = &n

		case "stat_workers", "max_open_files", "max_watches", "max_dir_entries", "prewarm_workers":
			n, err := intArg(d, sub)
			if err == nil {
				err = notZero(d, sub, n == 0)
			}
			if err != nil {
				return err
			}
			switch sub {
			case "stat_workers":
				fsrv.StatWorkers = n
			case "max_open_files":
				fsrv.MaxOpenFiles = n
			case "max_watches":
				fsrv.MaxWatches = n
			case "max_dir_entries":
				fsrv.MaxDirEntries = n
			default:
				fsrv.PrewarmWorkers = n
			}

		case "revalidate", "keep_hot":
			dur, err := durationArg(d, sub, oneArg(d))
			if err == nil {
				err = notZero(d, sub, dur == 0)
			}
			if err != nil {
				return err
			}
			if sub == "revalidate" {
				fsrv.Revalidate = dur
			} else {
				fsrv.KeepHot = dur
			}

		case "sendfile_max_chunk", "prewarm_budget":
			n, err := sizeArg(d, sub, oneArg(d))
			if err == nil {
				err = notZero(d, sub, n == 0)
			}
			if err != nil {
				return err
			}
			if sub == "sendfile_max_chunk" {
				fsrv.SendfileMaxChunk = int(n)
			} else {
				fsrv.PrewarmBudget = n
			}

		case "inotify":
			var s string
			if !d.Args(&s) || d.NextArg() || (s != "on" && s != "off") {
				return d.Err("inotify takes one argument: on or off")
			}
			fsrv.DisableInotify = s == "off"

		case "memory_cache":
			budget, maxFile, err := valueAndOption(d, "memory_cache <budget> [max_file <size>]", sizeArg)
			if err != nil {
				return err
			}
			fsrv.MemoryCache = &MemoryCache{Budget: budget, MaxFile: maxFile}

		case "transmit", "symlinks":
			s := oneArg(d)
			if sub == "transmit" {
				if s == "" {
					return d.Err("transmit takes one argument: auto, sendfile, io_uring or copy")
				}
				fsrv.Transmit = s
			} else {
				if s == "" {
					return d.Err("symlinks takes one argument: follow, deny or beneath")
				}
				fsrv.Symlinks = s
			}

		case "prewarm":
			fsrv.Prewarm = d.RemainingArgs()
			if len(fsrv.Prewarm) == 0 {
				return d.Err("prewarm needs at least one path or glob under the root (* for all)")
			}

		case "max_transfers":
			n, queue, err := valueAndOption(d, "max_transfers <n> [queue <duration>]", func(d *caddyfile.Dispenser, what, s string) (int64, error) {
				if what == sub {
					n, err := intValue(d, what, s)
					return int64(n), err
				}
				dur, err := durationArg(d, what, s)
				return int64(dur), err
			})
			if err != nil {
				return err
			}
			fsrv.MaxTransfers = &TransferLimit{Limit: int(n), Queue: caddy.Duration(queue)}

		case "limit_rate":
			rate, after, err := valueAndOption(d, "limit_rate <bytes/s> [after <size>]", sizeArg)
			if err != nil {
				return err
			}
			fsrv.LimitRate = &RateLimit{Rate: rate, After: after}

		default:
			return d.Errf("unknown subdirective '%s'", sub)
		}
	}
	return nil
}

// The helpers below only parse: every range check is in checkSettings, so
// JSON and the Caddyfile refuse the same values with the same message.

// notZero refuses an explicit 0 for a setting whose JSON 0 means the
// default: `revalidate 0` reads as "always" but would silently be 60s.
func notZero(d *caddyfile.Dispenser, sub string, zero bool) error {
	if zero {
		return d.Errf("`%s 0` would mean the default; leave it out", sub)
	}
	return nil
}

// oneArg returns the one argument of a subdirective, or "" if it has none
// or more than one (the callers' parsers then report it).
func oneArg(d *caddyfile.Dispenser) string {
	args := d.RemainingArgs()
	if len(args) != 1 {
		return ""
	}
	return args[0]
}

// valueAndOption parses the `<v> [keyword <v>]` form.
// usage is the form, e.g. "limit_rate <bytes/s> [after <size>]".
func valueAndOption[T any](d *caddyfile.Dispenser, usage string, parse func(*caddyfile.Dispenser, string, string) (T, error)) (T, T, error) {
	var v, opt T
	f := strings.Fields(usage)
	sub, keyword := f[0], f[2][1:]
	args := d.RemainingArgs()
	if len(args) != 1 && len(args) != 3 || len(args) == 3 && args[1] != keyword {
		return v, opt, d.Errf("%s syntax: %s", sub, usage)
	}
	v, err := parse(d, sub, args[0])
	if err == nil && len(args) == 3 {
		opt, err = parse(d, sub+" "+keyword, args[2])
	}
	return v, opt, err
}

// intArg reads the one integer argument of a subdirective.
func intArg(d *caddyfile.Dispenser, sub string) (int, error) {
	return intValue(d, sub, oneArg(d))
}

// intValue parses an integer.
func intValue(d *caddyfile.Dispenser, what, s string) (int, error) {
	if s == "" {
		return 0, d.Errf("%s takes exactly one argument: a number", what)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, d.Errf("%s: %q is not a number", what, s)
	}
	return n, nil
}

// durationArg parses a duration such as 500ms, 1h or 2d.
func durationArg(d *caddyfile.Dispenser, what, s string) (caddy.Duration, error) {
	if s == "" {
		return 0, d.Errf("%s takes exactly one argument: a duration", what)
	}
	dur, err := caddy.ParseDuration(s)
	if err != nil {
		return 0, d.Errf("%s: %q is not a duration (e.g. 500ms, 1m, 1h)", what, s)
	}
	return caddy.Duration(dur), nil
}

// sizeArg parses a size such as 64MiB, 512k or 1048576.
func sizeArg(d *caddyfile.Dispenser, what, s string) (int64, error) {
	if s == "" {
		return 0, d.Errf("%s takes exactly one argument: a size", what)
	}
	n, err := humanize.ParseBytes(s)
	if err != nil || n > 1<<40 {
		return 0, d.Errf("%s: %q is not a size (e.g. 64MiB, 512KB)", what, s)
	}
	return int64(n), nil
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
