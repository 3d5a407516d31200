package flashserve

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// badCaddyfile lists Caddyfile blocks (in siteWith, whose first line is
// line 3) that the parser must refuse, with the whole message after
// Caddy's "parsing caddyfile tokens for 'flash_serve': ": each names the
// subdirective, says what it takes and ends with the line. outOfRange
// holds the values that parse but are out of range.
// TestCaddyfileErrorsCoverEverySubdirective keeps the two complete.
var badCaddyfile = []struct{ lines, want string }{
	{"fs", "fs takes exactly one argument: the name of a file system, at Caddyfile:3"},
	{"fs a b", "fs takes exactly one argument: the name of a file system, at Caddyfile:3"},
	{"root", "root takes exactly one argument: a path, at Caddyfile:3"},
	{"root /a /b", "root takes exactly one argument: a path, at Caddyfile:3"},
	{"root /a\n\t\troot /b", "subdirective 'root' is given more than once, at Caddyfile:4"},
	{"hide", "hide needs at least one file or pattern, at Caddyfile:3"},
	{"index", "index needs at least one file name, at Caddyfile:3"},
	{"browse a b", "browse takes at most one argument: a template file, at Caddyfile:3"},
	{"browse {\n\t\t\treveal_symlinks yes\n\t\t}", `reveal_symlinks takes no arguments, got ["yes"], at Caddyfile:4`},
	{"browse {\n\t\t\treveal_symlinks\n\t\t\treveal_symlinks\n\t\t}", "reveal_symlinks is already enabled, at Caddyfile:5"},
	{"browse {\n\t\t\tsort sideways\n\t\t}", "unknown sort option 'sideways'; want name, namedirfirst, size, time, asc or desc, at Caddyfile:4"},
	{"browse {\n\t\t\tfile_limit many\n\t\t}", "file_limit should have an integer value, at Caddyfile:4"},
	{"browse {\n\t\t\tfile_limit\n\t\t}", "file_limit should have an integer value, at Caddyfile:4"},
	{"browse {\n\t\t\tplain_time_format\n\t\t}", "plain_time_format takes exactly one non-empty time layout; quote layouts with spaces, at Caddyfile:4"},
	{"browse {\n\t\t\tpaginate\n\t\t}", "unknown browse subdirective 'paginate'; want reveal_symlinks, sort, file_limit or plain_time_format, at Caddyfile:4"},
	{"precompressed lzma", "precompressed: unknown format 'lzma' (no module http.precompressed.lzma), at Caddyfile:3"},
	{"precompressed gzip gzip", "precompressed: format 'gzip' is listed twice, at Caddyfile:3"},
	{"status", "status takes exactly one argument: a status code or a placeholder, at Caddyfile:3"},
	{"status 200 201", "status takes exactly one argument: a status code or a placeholder, at Caddyfile:3"},
	{"disable_canonical_uris yes", `disable_canonical_uris takes no arguments, got ["yes"], at Caddyfile:3`},
	{"pass_thru yes", `pass_thru takes no arguments, got ["yes"], at Caddyfile:3`},
	{"etag_file_extensions", "etag_file_extensions needs at least one extension, at Caddyfile:3"},
	{"max_ranges", "max_ranges takes exactly one argument: a number, at Caddyfile:3"},
	{"max_ranges many", `max_ranges: "many" is not a number, at Caddyfile:3`},
	{"max_ranges 1 2", "max_ranges takes exactly one argument: a number, at Caddyfile:3"},
	{"stat_workers many", `stat_workers: "many" is not a number, at Caddyfile:3`},
	{"stat_workers 0", "`stat_workers 0` would mean the default; leave it out, at Caddyfile:3"},
	{"revalidate soon", `revalidate: "soon" is not a duration (e.g. 500ms, 1m, 1h), at Caddyfile:3`},
	{"revalidate", "revalidate takes exactly one argument: a duration, at Caddyfile:3"},
	{"inotify maybe", `inotify: need on or off, got "maybe", at Caddyfile:3`},
	{"inotify", "inotify takes one argument: on or off, at Caddyfile:3"},
	{"inotify on off", "inotify takes one argument: on or off, at Caddyfile:3"},
	{"max_open_files 1.5", `max_open_files: "1.5" is not a number, at Caddyfile:3`},
	{"negative_cache lots", `negative_cache: "lots" is not a number, at Caddyfile:3`},
	{"max_watches 0", "`max_watches 0` would mean the default; leave it out, at Caddyfile:3"},
	{"max_dir_entries x", `max_dir_entries: "x" is not a number, at Caddyfile:3`},
	{"max_entries x", `max_entries: "x" is not a number, at Caddyfile:3`},
	{"memory_cache", "memory_cache syntax: memory_cache <budget> [max_file <size>], at Caddyfile:3"},
	{"memory_cache lots", `memory_cache: "lots" is not a size (e.g. 64MiB, 512KB), at Caddyfile:3`},
	{"memory_cache 64MiB max 1KiB", "memory_cache syntax: memory_cache <budget> [max_file <size>], at Caddyfile:3"},
	{"memory_cache 64MiB max_file", "memory_cache syntax: memory_cache <budget> [max_file <size>], at Caddyfile:3"},
	{"memory_cache 64MiB max_file big", `memory_cache max_file: "big" is not a size (e.g. 64MiB, 512KB), at Caddyfile:3`},
	{"transmit", "transmit takes one argument: auto, sendfile, io_uring or copy, at Caddyfile:3"},
	{"transmit sendfile copy", "transmit takes one argument: auto, sendfile, io_uring or copy, at Caddyfile:3"},
	{"sendfile_max_chunk", "sendfile_max_chunk takes exactly one argument: a size, at Caddyfile:3"},
	{"sendfile_max_chunk big", `sendfile_max_chunk: "big" is not a size (e.g. 64MiB, 512KB), at Caddyfile:3`},
	{"sendfile_max_chunk 0", "`sendfile_max_chunk 0` would mean the default; leave it out, at Caddyfile:3"},
	{"prewarm", "prewarm needs at least one path or glob under the root (* for all), at Caddyfile:3"},
	{"prewarm *\n\t\tprewarm_budget 9EiB", `prewarm_budget: "9EiB" is too large a size for this setting, at Caddyfile:4`},
	{"prewarm *\n\t\tprewarm_budget lots", `prewarm_budget: "lots" is not a size (e.g. 64MiB, 512KB), at Caddyfile:4`},
	{"prewarm *\n\t\tprewarm_workers many", `prewarm_workers: "many" is not a number, at Caddyfile:4`},
	{"prewarm *\n\t\tprewarm_busy_rate fast", `prewarm_busy_rate: "fast" is not a size (e.g. 64MiB, 512KB), at Caddyfile:4`},
	{"prewarm *\n\t\tkeep_hot soon", `keep_hot: "soon" is not a duration (e.g. 500ms, 1m, 1h), at Caddyfile:4`},
	{"symlinks", "symlinks takes one argument: follow, deny or beneath, at Caddyfile:3"},
	{"symlinks deny beneath", "symlinks takes one argument: follow, deny or beneath, at Caddyfile:3"},
	{"max_transfers", "max_transfers syntax: max_transfers <n> [queue <duration>], at Caddyfile:3"},
	{"max_transfers many", `max_transfers: "many" is not a number, at Caddyfile:3`},
	{"max_transfers 8 wait 2s", "max_transfers syntax: max_transfers <n> [queue <duration>], at Caddyfile:3"},
	{"max_transfers 8 queue soon", `max_transfers queue: "soon" is not a duration (e.g. 500ms, 1m, 1h), at Caddyfile:3`},
	{"limit_rate", "limit_rate syntax: limit_rate <bytes/s> [after <size>], at Caddyfile:3"},
	{"limit_rate fast", `limit_rate: "fast" is not a size (e.g. 64MiB, 512KB), at Caddyfile:3`},
	{"limit_rate 1MiB after lots", `limit_rate after: "lots" is not a size (e.g. 64MiB, 512KB), at Caddyfile:3`},
	{"sendfile on", "unknown subdirective 'sendfile', at Caddyfile:3"},
}

// TestCaddyfileRefusesBadValues: each block of badCaddyfile fails to
// adapt with its message, in one line.
func TestCaddyfileRefusesBadValues(t *testing.T) {
	for _, c := range badCaddyfile {
		want := "error: parsing caddyfile tokens for 'flash_serve': " + c.want + "\n"
		if got := adaptForTest(siteWith(c.lines)); got != want {
			t.Errorf("%q:\n got %s want %s", c.lines, got, want)
		}
	}
	// The directive's own arguments.
	got := adaptForTest(":8080 {\n\tflash_serve listing\n}\n")
	want := "error: parsing caddyfile tokens for 'flash_serve': unexpected argument(s) [\"listing\"]; the only argument allowed is 'browse', at Caddyfile:2\n"
	if got != want {
		t.Errorf("flash_serve listing:\n got %s want %s", got, want)
	}
}

var atLine = regexp.MustCompile(`, at Caddyfile:(\d+)$`)

// TestCaddyfileErrorsCoverEverySubdirective: every subdirective of the
// syntax in UnmarshalCaddyfile's doc comment, browse's included, is the
// line some error of badCaddyfile or outOfRange points at.
func TestCaddyfileErrorsCoverEverySubdirective(t *testing.T) {
	pointedAt := make(map[string]bool)
	point := func(lines, msg string) {
		m := atLine.FindStringSubmatch(msg)
		if m == nil {
			t.Errorf("%q: the message %q names no line", lines, msg)
			return
		}
		n, _ := strconv.Atoi(m[1])
		all := strings.Split(siteWith(lines), "\n")
		if n < 1 || n > len(all) {
			t.Errorf("%q: line %d is not in the Caddyfile", lines, n)
			return
		}
		if f := strings.Fields(all[n-1]); len(f) > 0 {
			pointedAt[f[0]] = true
		}
	}
	for _, c := range badCaddyfile {
		point(c.lines, c.want)
	}
	for _, c := range outOfRange {
		point(c.caddyfile, c.wantCaddyfile)
	}
	syntax := syntaxBlock(t)
	for _, line := range syntax[1:] {
		sub := strings.Fields(line)[0]
		if sub == "}" {
			continue
		}
		if !pointedAt[sub] {
			t.Errorf("subdirective %s: no error in badCaddyfile or outOfRange points at it", sub)
		}
	}
}
