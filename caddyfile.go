package flashserve

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
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
		if fileHidden(file, newHideList(fsrv.Hide)) {
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
//	    max_entries   <n>
//	    memory_cache  <budget> [max_file <size>]
//	    transmit      auto|sendfile|io_uring|copy
//	    sendfile_max_chunk <size>
//	    prewarm       <paths or globs...>
//	    prewarm_budget <size>
//	    prewarm_workers <n>
//	    prewarm_busy_rate <bytes/s>
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
	directive := d.Token()

	args := d.RemainingArgs()
	switch {
	case len(args) == 1 && args[0] == "browse":
		fsrv.Browse = new(fileserver.Browse)
	case len(args) > 0:
		return d.Errf("unexpected argument(s) %q; the only argument allowed is 'browse'", args)
	}

	counts := map[string]*int{"stat_workers": &fsrv.StatWorkers, "max_open_files": &fsrv.MaxOpenFiles,
		"max_watches": &fsrv.MaxWatches, "max_dir_entries": &fsrv.MaxDirEntries, "max_entries": &fsrv.MaxEntries, "prewarm_workers": &fsrv.PrewarmWorkers}
	// at holds the token of each subdirective, for the line of a value
	// checkSettings refuses.
	at := make(map[string]caddyfile.Token)
	for d.NextBlock(0) {
		sub := d.Val()
		if _, seen := at[sub]; seen && sub != "hide" {
			return d.Errf("subdirective '%s' is given more than once", sub)
		}
		at[sub] = d.Token()

		var err error
		switch sub {
		case "fs":
			fsrv.FileSystem, err = word(d, "fs takes exactly one argument: the name of a file system")
		case "root":
			fsrv.Root, err = word(d, "root takes exactly one argument: a path")
		case "hide":
			var hide []string
			hide, err = words(d, "hide needs at least one file or pattern")
			fsrv.Hide = append(fsrv.Hide, hide...)
		case "index":
			fsrv.IndexNames, err = words(d, "index needs at least one file name")
		case "browse":
			if fsrv.Browse != nil {
				return d.Err("browsing is already configured")
			}
			err = unmarshalBrowse(d, fsrv)
		case "precompressed":
			err = unmarshalPrecompressed(d, fsrv)
		case "status":
			var code string
			code, err = word(d, "status takes exactly one argument: a status code or a placeholder")
			fsrv.StatusCode = caddyhttp.WeakString(code)
		case "disable_canonical_uris":
			f := false
			fsrv.CanonicalURIs, err = &f, noArgs(d, sub)
		case "pass_thru":
			fsrv.PassThru, err = true, noArgs(d, sub)
		case "etag_file_extensions":
			fsrv.EtagFileExtensions, err = words(d, "etag_file_extensions needs at least one extension")
		case "max_ranges":
			fsrv.MaxRanges, err = pointer(arg(d, sub, intValue))
		case "negative_cache":
			fsrv.NegativeCache, err = pointer(arg(d, sub, intValue))
		case "stat_workers", "max_open_files", "max_watches", "max_dir_entries", "max_entries", "prewarm_workers":
			*counts[sub], err = notDefault(d, sub, intValue)
		case "revalidate":
			fsrv.Revalidate, err = notDefault(d, sub, durationValue)
		case "keep_hot":
			fsrv.KeepHot, err = notDefault(d, sub, durationValue)
		case "sendfile_max_chunk":
			fsrv.SendfileMaxChunk, err = notDefault(d, sub, sizeValue[int])
		case "prewarm_budget":
			fsrv.PrewarmBudget, err = notDefault(d, sub, sizeValue[int64])
		case "prewarm_busy_rate":
			fsrv.PrewarmBusyRate, err = notDefault(d, sub, sizeValue[int64])
		case "inotify":
			var s string
			s, err = word(d, "inotify takes one argument: on or off")
			if err == nil && s != "on" && s != "off" {
				err = d.Errf("inotify: need on or off, got %q", s)
			}
			fsrv.DisableInotify = s == "off"
		case "memory_cache":
			m := new(MemoryCache)
			m.Budget, m.MaxFile, err = valueAndOption(d, "memory_cache <budget> [max_file <size>]", sizeValue[int64], sizeValue[int64])
			fsrv.MemoryCache = m
		case "transmit":
			fsrv.Transmit, err = word(d, "transmit takes one argument: "+transmitEngines)
		case "symlinks":
			fsrv.Symlinks, err = word(d, "symlinks takes one argument: follow, deny or beneath")
		case "prewarm":
			fsrv.Prewarm, err = words(d, "prewarm needs at least one path or glob under the root (* for all)")
		case "max_transfers":
			l := new(TransferLimit)
			l.Limit, l.Queue, err = valueAndOption(d, "max_transfers <n> [queue <duration>]", intValue, durationValue)
			fsrv.MaxTransfers = l
		case "limit_rate":
			l := new(RateLimit)
			l.Rate, l.After, err = valueAndOption(d, "limit_rate <bytes/s> [after <size>]", sizeValue[int64], sizeValue[int64])
			fsrv.LimitRate = l
		default:
			return d.Errf("unknown subdirective '%s'", sub)
		}
		if err != nil {
			return err
		}
	}
	// The ranges are checked where JSON's are, and a refusal is reported
	// at the line of the subdirective that set the value.
	if err := fsrv.checkSettings(); err != nil {
		return caddyfileError(err, at, directive)
	}
	return nil
}

// caddyfileError reports a refusal of checkSettings at the line of the
// subdirective that set the field (else the directive's), in the
// Caddyfile's spelling: "memory_cache max_file: need 0 or more, got -1KiB".
func caddyfileError(err error, at map[string]caddyfile.Token, directive caddyfile.Token) error {
	tok := directive
	msg := err.Error()
	var se *settingError
	if errors.As(err, &se) {
		spelling, sub := se.caddyfileName()
		if t, ok := at[sub]; ok {
			tok = t
		}
		msg = spelling + ": " + se.rule
	}
	d := caddyfile.NewDispenser([]caddyfile.Token{tok})
	d.Next()
	return d.Err(msg)
}

// The helpers below only parse: every range check is in checkSettings,
// which UnmarshalCaddyfile calls once the block is read, so that JSON and
// the Caddyfile refuse the same values for the same reason. A value
// parser takes the name to report (the subdirective, or it and the
// keyword of its option) and the argument, "" when there is none.

// word reads the one argument of a subdirective; usage is the error when
// there is none or more than one.
func word(d *caddyfile.Dispenser, usage string) (string, error) {
	s := oneArg(d)
	if s == "" {
		return "", d.Err(usage)
	}
	return s, nil
}

// words reads the arguments of a subdirective that takes one or more;
// usage is the error when there is none.
func words(d *caddyfile.Dispenser, usage string) ([]string, error) {
	args := d.RemainingArgs()
	if len(args) == 0 {
		return nil, d.Err(usage)
	}
	return args, nil
}

// noArgs refuses arguments to a subdirective that takes none.
func noArgs(d *caddyfile.Dispenser, sub string) error {
	if args := d.RemainingArgs(); len(args) > 0 {
		return d.Errf("%s takes no arguments, got %q", sub, args)
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

// arg parses the `<n>`, `<size>` or `<duration>` form: one argument.
func arg[T any](d *caddyfile.Dispenser, sub string, parse func(*caddyfile.Dispenser, string, string) (T, error)) (T, error) {
	return parse(d, sub, oneArg(d))
}

// notDefault parses the one argument of a setting whose JSON zero means
// the default, and refuses an explicit zero: `revalidate 0` reads as
// "always" but would silently be 60s.
func notDefault[T comparable](d *caddyfile.Dispenser, sub string, parse func(*caddyfile.Dispenser, string, string) (T, error)) (T, error) {
	v, err := arg(d, sub, parse)
	var zero T
	if err == nil && v == zero {
		err = d.Errf("`%s 0` would mean the default; leave it out", sub)
	}
	return v, err
}

// pointer returns a pointer to v, for the settings whose zero is a value
// and whose absence (nil) is the default.
func pointer[T any](v T, err error) (*T, error) {
	return &v, err
}

// valueAndOption parses the `<v> [keyword <o>]` form, each part with its
// parser. usage is the form, e.g. "limit_rate <bytes/s> [after <size>]".
func valueAndOption[V, O any](d *caddyfile.Dispenser, usage string,
	value func(*caddyfile.Dispenser, string, string) (V, error),
	option func(*caddyfile.Dispenser, string, string) (O, error)) (V, O, error) {
	var v V
	var o O
	f := strings.Fields(usage)
	sub, keyword := f[0], f[2][1:]
	args := d.RemainingArgs()
	if len(args) != 1 && len(args) != 3 || len(args) == 3 && args[1] != keyword {
		return v, o, d.Errf("%s syntax: %s", sub, usage)
	}
	v, err := value(d, sub, args[0])
	if err == nil && len(args) == 3 {
		o, err = option(d, sub+" "+keyword, args[2])
	}
	return v, o, err
}

// intValue parses an integer; a sign is read, not refused.
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

// durationValue parses a duration such as 500ms, 1h or 2d; a sign is
// read, not refused.
func durationValue(d *caddyfile.Dispenser, what, s string) (caddy.Duration, error) {
	if s == "" {
		return 0, d.Errf("%s takes exactly one argument: a duration", what)
	}
	dur, err := caddy.ParseDuration(s)
	if err != nil {
		return 0, d.Errf("%s: %q is not a duration (e.g. 500ms, 1m, 1h)", what, s)
	}
	return caddy.Duration(dur), nil
}

// sizeValue parses a size such as 64MiB, 512k or 1048576. A leading minus
// is read, not refused, as for numbers and durations, so that Validate
// gives a negative size the message JSON's gets.
func sizeValue[T int | int64](d *caddyfile.Dispenser, what, s string) (T, error) {
	if s == "" {
		return 0, d.Errf("%s takes exactly one argument: a size", what)
	}
	digits, negative := strings.CutPrefix(s, "-")
	n, err := humanize.ParseBytes(digits)
	if err != nil {
		return 0, d.Errf("%s: %q is not a size (e.g. 64MiB, 512KB)", what, s)
	}
	v := T(n)
	if v < 0 || uint64(v) != n {
		return 0, d.Errf("%s: %q is too large a size for this setting", what, s)
	}
	if negative {
		v = -v
	}
	return v, nil
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
			if err := noArgs(d, "reveal_symlinks"); err != nil {
				return err
			}
			b.RevealSymlinks = true
		case "sort":
			for d.NextArg() {
				switch opt := d.Val(); opt {
				case "name", "namedirfirst", "size", "time", "asc", "desc":
					b.SortOptions = append(b.SortOptions, opt)
				default:
					return d.Errf("unknown sort option '%s'; want name, namedirfirst, size, time, asc or desc", opt)
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
			return d.Errf("unknown browse subdirective '%s'; want reveal_symlinks, sort, file_limit or plain_time_format", d.Val())
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
	mods, err := precompressors(order)
	if err != nil {
		return d.Errf("precompressed: %v", err)
	}
	fsrv.PrecompressedRaw, fsrv.PrecompressedOrder = mods, order
	return nil
}

// Interface guards
var _ caddyfile.Unmarshaler = (*FlashServe)(nil)
