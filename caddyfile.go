package flashserve

import (
	"path/filepath"

	"github.com/dustin/go-humanize"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/encode"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/fileserver"

	"github.com/flashserve/caddy-flash-serve/statacc"
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

		case "stat_workers", "max_open_files", "negative_cache", "max_watches", "max_dir_entries":
			n, err := intArg(d, sub)
			if err != nil {
				return err
			}
			switch sub {
			case "stat_workers":
				if n < 1 {
					return d.Errf("stat_workers: need at least 1 worker, got %d", n)
				}
				fsrv.StatWorkers = n
			case "max_open_files":
				if n < 1 {
					return d.Errf("max_open_files: need at least 1, got %d", n)
				}
				fsrv.MaxOpenFiles = n
			case "negative_cache":
				if n < 0 {
					return d.Errf("negative_cache: %d is negative; 0 disables it", n)
				}
				fsrv.NegativeCache = &n
			case "max_watches", "max_dir_entries":
				if n < 1 {
					return d.Errf("%s: need at least 1, got %d", sub, n)
				}
				if sub == "max_watches" {
					fsrv.MaxWatches = n
				} else {
					fsrv.MaxDirEntries = n
				}
			}

		case "revalidate":
			var s string
			if !d.Args(&s) || d.NextArg() {
				return d.Err("revalidate takes exactly one argument: a duration")
			}
			dur, err := caddy.ParseDuration(s)
			if err != nil || dur <= 0 {
				return d.Errf("revalidate: %q is not a positive duration", s)
			}
			fsrv.Revalidate = caddy.Duration(dur)

		case "inotify":
			var s string
			if !d.Args(&s) || d.NextArg() || (s != "on" && s != "off") {
				return d.Err("inotify takes one argument: on or off")
			}
			fsrv.DisableInotify = s == "off"

		case "memory_cache":
			args := d.RemainingArgs()
			if len(args) != 1 && len(args) != 3 || len(args) == 3 && args[1] != "max_file" {
				return d.Err("memory_cache syntax: memory_cache <budget> [max_file <size>]")
			}
			budget, err := sizeArg(d, "memory_cache budget", args[0])
			if err != nil {
				return err
			}
			fsrv.MemoryCache = &MemoryCache{Budget: budget}
			if len(args) == 3 {
				if fsrv.MemoryCache.MaxFile, err = sizeArg(d, "memory_cache max_file", args[2]); err != nil {
					return err
				}
			}

		case "transmit":
			var s string
			if !d.Args(&s) || d.NextArg() {
				return d.Err("transmit takes one argument: auto, sendfile, io_uring or copy")
			}
			switch s {
			case engineAuto, engineSendfile, engineCopy, engineIOUring:
			default:
				return d.Errf("transmit: unknown engine %q; want auto, sendfile, io_uring or copy", s)
			}
			fsrv.Transmit = s

		case "sendfile_max_chunk":
			var s string
			if !d.Args(&s) || d.NextArg() {
				return d.Err("sendfile_max_chunk takes one argument: a size")
			}
			n, err := sizeArg(d, "sendfile_max_chunk", s)
			if err != nil {
				return err
			}
			if n < 64<<10 || n > 1<<30 {
				return d.Errf("sendfile_max_chunk: %s is outside 64KiB..1GiB", s)
			}
			fsrv.SendfileMaxChunk = int(n)

		case "prewarm":
			fsrv.Prewarm = d.RemainingArgs()
			if len(fsrv.Prewarm) == 0 {
				return d.Err("prewarm needs at least one path or glob under the root (* for all)")
			}

		case "prewarm_budget":
			var s string
			if !d.Args(&s) || d.NextArg() {
				return d.Err("prewarm_budget takes one argument: a size")
			}
			n, err := sizeArg(d, "prewarm_budget", s)
			if err != nil {
				return err
			}
			if n < 1 {
				return d.Err("prewarm_budget must be more than 0")
			}
			fsrv.PrewarmBudget = n

		case "prewarm_workers":
			n, err := intArg(d, sub)
			if err != nil {
				return err
			}
			if n < 1 || n > 64 {
				return d.Errf("prewarm_workers: %d is outside 1..64", n)
			}
			fsrv.PrewarmWorkers = n

		case "keep_hot":
			var s string
			if !d.Args(&s) || d.NextArg() {
				return d.Err("keep_hot takes one argument: an interval")
			}
			dur, err := caddy.ParseDuration(s)
			if err != nil || dur < time.Second {
				return d.Errf("keep_hot: %q is not an interval of a second or more", s)
			}
			fsrv.KeepHot = caddy.Duration(dur)

		case "symlinks":
			var s string
			if !d.Args(&s) || d.NextArg() {
				return d.Err("symlinks takes one argument: follow, deny or beneath")
			}
			if _, err := statacc.ParseSymlinks(s); err != nil {
				return d.Err(err.Error())
			}
			fsrv.Symlinks = s

		case "max_transfers":
			args := d.RemainingArgs()
			if len(args) != 1 && len(args) != 3 || len(args) == 3 && args[1] != "queue" {
				return d.Err("max_transfers syntax: max_transfers <n> [queue <duration>]")
			}
			n, err := strconv.Atoi(args[0])
			if err != nil || n < 1 {
				return d.Errf("max_transfers: %q is not a number of 1 or more", args[0])
			}
			fsrv.MaxTransfers = &TransferLimit{Limit: n}
			if len(args) == 3 {
				dur, err := caddy.ParseDuration(args[2])
				if err != nil || dur < 0 {
					return d.Errf("max_transfers queue: %q is not a duration", args[2])
				}
				fsrv.MaxTransfers.Queue = caddy.Duration(dur)
			}

		case "limit_rate":
			args := d.RemainingArgs()
			if len(args) != 1 && len(args) != 3 || len(args) == 3 && args[1] != "after" {
				return d.Err("limit_rate syntax: limit_rate <bytes/s> [after <size>]")
			}
			rate, err := sizeArg(d, "limit_rate", args[0])
			if err != nil {
				return err
			}
			if rate < 1 {
				return d.Err("limit_rate: the rate must be at least 1 byte/s")
			}
			fsrv.LimitRate = &RateLimit{Rate: rate}
			if len(args) == 3 {
				if fsrv.LimitRate.After, err = sizeArg(d, "limit_rate after", args[2]); err != nil {
					return err
				}
			}

		default:
			return d.Errf("unknown subdirective '%s'", sub)
		}
	}
	if fsrv.Prewarm == nil && (fsrv.PrewarmBudget != 0 || fsrv.PrewarmWorkers != 0 || fsrv.KeepHot != 0) {
		return d.Err("prewarm_budget, prewarm_workers and keep_hot need prewarm")
	}
	return nil
}

// intArg reads the one integer argument of a subdirective.
func intArg(d *caddyfile.Dispenser, sub string) (int, error) {
	var s string
	if !d.Args(&s) || d.NextArg() {
		return 0, d.Errf("%s takes exactly one argument: a number", sub)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, d.Errf("%s: %q is not a number", sub, s)
	}
	return n, nil
}

// sizeArg parses a size such as 64MiB, 512k or 1048576.
func sizeArg(d *caddyfile.Dispenser, what, s string) (int64, error) {
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
