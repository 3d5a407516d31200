package flashserve

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// outOfRange lists values out of their setting's range, each as a
// Caddyfile subdirective (in siteWith, whose first line is line 3), the
// same value in JSON, and the message each is refused with: JSON's names
// the field, the Caddyfile's the subdirective and its line, and both say
// what is allowed. TestOutOfRangeCoversEverySetting keeps it complete.
var outOfRange = []struct{ caddyfile, json, wantJSON, wantCaddyfile string }{
	{"stat_workers -1", `"stat_workers": -1`,
		"stat_workers: need at least 1, got -1", "stat_workers: need at least 1, got -1, at Caddyfile:3"},
	{"max_open_files -3", `"max_open_files": -3`,
		"max_open_files: need at least 1, got -3", "max_open_files: need at least 1, got -3, at Caddyfile:3"},
	{"max_watches -1", `"max_watches": -1`,
		"max_watches: need at least 1, got -1", "max_watches: need at least 1, got -1, at Caddyfile:3"},
	{"max_dir_entries -2", `"max_dir_entries": -2`,
		"max_dir_entries: need at least 1, got -2", "max_dir_entries: need at least 1, got -2, at Caddyfile:3"},
	{"max_entries -2", `"max_entries": -2`,
		"max_entries: need at least 1, got -2", "max_entries: need at least 1, got -2, at Caddyfile:3"},
	{"negative_cache -1", `"negative_cache": -1`,
		"negative_cache: need 0 (off) to 1073741824, got -1", "negative_cache: need 0 (off) to 1073741824, got -1, at Caddyfile:3"},
	{"negative_cache 1073741825", `"negative_cache": 1073741825`,
		"negative_cache: need 0 (off) to 1073741824, got 1073741825", "negative_cache: need 0 (off) to 1073741824, got 1073741825, at Caddyfile:3"},
	{"max_ranges -1", `"max_ranges": -1`,
		"max_ranges: need 0 (no ranges) or more, got -1", "max_ranges: need 0 (no ranges) or more, got -1, at Caddyfile:3"},
	{"memory_cache -1", `"memory_cache": {"budget": -1}`,
		"memory_cache.budget: need 0 (off) or more, got -1 bytes", "memory_cache: need 0 (off) or more, got -1 bytes, at Caddyfile:3"},
	{"memory_cache 1MiB max_file -1KiB", `"memory_cache": {"budget": 1048576, "max_file": -1024}`,
		"memory_cache.max_file: need 0 or more, got -1KiB", "memory_cache max_file: need 0 or more, got -1KiB, at Caddyfile:3"},
	{"prewarm *\n\t\tprewarm_budget -1GiB", `"prewarm": ["*"], "prewarm_budget": -1073741824`,
		"prewarm_budget: need more than 0, got -1GiB", "prewarm_budget: need more than 0, got -1GiB, at Caddyfile:4"},
	{"revalidate -5s", `"revalidate": -5000000000`,
		"revalidate: need a positive duration, got -5s", "revalidate: need a positive duration, got -5s, at Caddyfile:3"},
	{"transmit splice", `"transmit": "splice"`,
		`transmit: need auto, sendfile, io_uring or copy, got "splice"`, `transmit: need auto, sendfile, io_uring or copy, got "splice", at Caddyfile:3`},
	{"root /srv\n\t\tindex a.html\n\t\ttransmit fast", `"root": "/srv", "index_names": ["a.html"], "transmit": "fast"`,
		`transmit: need auto, sendfile, io_uring or copy, got "fast"`, `transmit: need auto, sendfile, io_uring or copy, got "fast", at Caddyfile:5`},
	{"sendfile_max_chunk 1", `"sendfile_max_chunk": 1`,
		"sendfile_max_chunk: need 64KiB to 1GiB, got 1 byte", "sendfile_max_chunk: need 64KiB to 1GiB, got 1 byte, at Caddyfile:3"},
	{"sendfile_max_chunk 65535", `"sendfile_max_chunk": 65535`,
		"sendfile_max_chunk: need 64KiB to 1GiB, got 65535 bytes", "sendfile_max_chunk: need 64KiB to 1GiB, got 65535 bytes, at Caddyfile:3"},
	{"sendfile_max_chunk 10KiB", `"sendfile_max_chunk": 10240`,
		"sendfile_max_chunk: need 64KiB to 1GiB, got 10KiB", "sendfile_max_chunk: need 64KiB to 1GiB, got 10KiB, at Caddyfile:3"},
	{"sendfile_max_chunk 2GiB", `"sendfile_max_chunk": 2147483648`,
		"sendfile_max_chunk: need 64KiB to 1GiB, got 2GiB", "sendfile_max_chunk: need 64KiB to 1GiB, got 2GiB, at Caddyfile:3"},
	{"prewarm *\n\t\tprewarm_busy_rate -1MiB", `"prewarm": ["*"], "prewarm_busy_rate": -1048576`,
		"prewarm_busy_rate: need more than 0 bytes/s, got -1MiB", "prewarm_busy_rate: need more than 0 bytes/s, got -1MiB, at Caddyfile:4"},
	{"prewarm_busy_rate 1MiB", `"prewarm_busy_rate": 1048576`,
		"prewarm_busy_rate: needs prewarm, the paths to warm", "prewarm_busy_rate: needs prewarm, the paths to warm, at Caddyfile:3"},
	{"prewarm *\n\t\tprewarm_workers 65", `"prewarm": ["*"], "prewarm_workers": 65`,
		"prewarm_workers: need 1 to 64, got 65", "prewarm_workers: need 1 to 64, got 65, at Caddyfile:4"},
	{"prewarm *\n\t\tprewarm_workers -1", `"prewarm": ["*"], "prewarm_workers": -1`,
		"prewarm_workers: need 1 to 64, got -1", "prewarm_workers: need 1 to 64, got -1, at Caddyfile:4"},
	{"prewarm *\n\t\tkeep_hot 10ms", `"prewarm": ["*"], "keep_hot": 10000000`,
		"keep_hot: need an interval of 1s or more, got 10ms", "keep_hot: need an interval of 1s or more, got 10ms, at Caddyfile:4"},
	{"prewarm *\n\t\tkeep_hot -1s", `"prewarm": ["*"], "keep_hot": -1000000000`,
		"keep_hot: need an interval of 1s or more, got -1s", "keep_hot: need an interval of 1s or more, got -1s, at Caddyfile:4"},
	{"prewarm_workers 2", `"prewarm_workers": 2`,
		"prewarm_workers: needs prewarm, the paths to warm", "prewarm_workers: needs prewarm, the paths to warm, at Caddyfile:3"},
	{"keep_hot 1m", `"keep_hot": 60000000000`,
		"keep_hot: needs prewarm, the paths to warm", "keep_hot: needs prewarm, the paths to warm, at Caddyfile:3"},
	{"root /srv\n\t\tprewarm_budget 1GiB", `"root": "/srv", "prewarm_budget": 1073741824`,
		"prewarm_budget: needs prewarm, the paths to warm", "prewarm_budget: needs prewarm, the paths to warm, at Caddyfile:4"},
	{"symlinks sometimes", `"symlinks": "sometimes"`,
		`symlinks: unknown mode "sometimes"; want follow, deny or beneath`, `symlinks: unknown mode "sometimes"; want follow, deny or beneath, at Caddyfile:3`},
	{"max_transfers 0", `"max_transfers": {"limit": 0}`,
		"max_transfers.limit: need 1 or more, got 0", "max_transfers: need 1 or more, got 0, at Caddyfile:3"},
	{"max_transfers 4 queue -1s", `"max_transfers": {"limit": 4, "queue": -1000000000}`,
		"max_transfers.queue: need 0 or more, got -1s", "max_transfers queue: need 0 or more, got -1s, at Caddyfile:3"},
	{"max_transfers -2 queue 1s", `"max_transfers": {"limit": -2, "queue": 1000000000}`,
		"max_transfers.limit: need 1 or more, got -2", "max_transfers: need 1 or more, got -2, at Caddyfile:3"},
	{"limit_rate 0", `"limit_rate": {"rate": 0}`,
		"limit_rate.rate: need 1 byte/s or more, got 0 bytes", "limit_rate: need 1 byte/s or more, got 0 bytes, at Caddyfile:3"},
	{"limit_rate -1KiB", `"limit_rate": {"rate": -1024}`,
		"limit_rate.rate: need 1 byte/s or more, got -1KiB", "limit_rate: need 1 byte/s or more, got -1KiB, at Caddyfile:3"},
	{"limit_rate 1MiB after -1", `"limit_rate": {"rate": 1048576, "after": -1}`,
		"limit_rate.after: need 0 or more, got -1 bytes", "limit_rate after: need 0 or more, got -1 bytes, at Caddyfile:3"},
	{"status ok", `"status_code": "ok"`,
		`status_code: need a status code from 100 to 999 or a placeholder, got "ok"`, `status: need a status code from 100 to 999 or a placeholder, got "ok", at Caddyfile:3`},
	{"status 99", `"status_code": 99`,
		`status_code: need a status code from 100 to 999 or a placeholder, got "99"`, `status: need a status code from 100 to 999 or a placeholder, got "99", at Caddyfile:3`},
}

// unranged are the settings that have no range to check: any value JSON
// can hold is valid, or the Caddyfile parser and JSON unmarshalling both
// refuse it by its type (inotify on|off, browse's block), or it is checked
// against other settings (precompressed_order).
var unranged = []string{"fs", "root", "hide", "index_names", "browse", "canonical_uris", "pass_thru",
	"precompressed", "precompressed_order", "etag_file_extensions", "disable_inotify", "prewarm"}

// TestOutOfRangeCoversEverySetting: every JSON setting of the handler,
// and every field of its nested settings, is either refused out of range
// in outOfRange, from JSON and the Caddyfile alike, or listed in
// unranged; a new setting must be put in one of the two.
func TestOutOfRangeCoversEverySetting(t *testing.T) {
	covered := make(map[string]bool)
	for _, c := range outOfRange {
		var v map[string]any
		if err := json.Unmarshal([]byte("{"+c.json+"}"), &v); err != nil {
			t.Fatalf("%s: %v", c.json, err)
		}
		for k, val := range v {
			if len(v) > 1 && slices.Contains(unranged, k) {
				continue // context: prewarm beside prewarm_budget, or lines before the bad one
			}
			covered[k] = true
			if nested, ok := val.(map[string]any); ok {
				for nk := range nested {
					covered[k+"."+nk] = true
				}
			}
		}
	}
	for _, k := range unranged {
		if covered[k] {
			t.Errorf("%s is listed as unranged but outOfRange has it", k)
		}
		covered[k] = true
	}
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			if !covered[prefix+name] {
				t.Errorf("setting %s%s: no out-of-range case in outOfRange, and not listed in unranged", prefix, name)
			}
			if st := f.Type; st.Kind() == reflect.Pointer && st.Elem().Kind() == reflect.Struct && st.Elem().PkgPath() == typ.PkgPath() {
				walk(prefix+name+".", st.Elem())
			}
		}
	}
	walk("", reflect.TypeFor[FlashServe]())
}

// siteWith is a Caddyfile site whose flash_serve block holds lines.
func siteWith(lines string) string {
	return ":8080 {\n\tflash_serve {\n\t\t" + lines + "\n\t}\n}\n"
}

// TestOutOfRangeRefusedWhereWritten: each out-of-range value is refused
// by the Validate of a handler unmarshalled from JSON and by Caddy
// validating a JSON config (which provisions first), with the JSON field's
// name; and by the Caddyfile parser, at the line that wrote it, with the
// subdirective's name, so that `caddy adapt` refuses it.
func TestOutOfRangeRefusedWhereWritten(t *testing.T) {
	for _, c := range outOfRange {
		t.Run(strings.ReplaceAll(c.caddyfile, "\n\t\t", "; "), func(t *testing.T) {
			var fsrv FlashServe
			if err := json.Unmarshal([]byte("{"+c.json+"}"), &fsrv); err != nil {
				t.Fatalf("unmarshalling %s: %v", c.json, err)
			}
			if err := fsrv.Validate(); err == nil || err.Error() != c.wantJSON {
				t.Errorf("JSON Validate: got %v, want %q", err, c.wantJSON)
			}
			cfgJSON := `{"apps": {"http": {"servers": {"s": {"listen": [":8080"], "routes": [{"handle": [{"handler": "flash_serve", ` + c.json + `}]}]}}}}}`
			if got := validateForTest(cfgJSON); !strings.HasPrefix(got, "error: ") || !strings.HasSuffix(strings.TrimSpace(got), ": "+c.wantJSON) {
				t.Errorf("JSON config: got %s, want an error ending in %q", got, c.wantJSON)
			}
			want := "error: parsing caddyfile tokens for 'flash_serve': " + c.wantCaddyfile + "\n"
			if got := adaptForTest(siteWith(c.caddyfile)); got != want {
				t.Errorf("Caddyfile: got %s want %s", got, want)
			}
		})
	}
}

// TestValidateAcceptsTheBounds: the ends of each range are accepted, from
// JSON and from the Caddyfile alike, so the checks above refuse no more
// than they should.
func TestValidateAcceptsTheBounds(t *testing.T) {
	for _, c := range []struct{ caddyfile, json string }{
		{"sendfile_max_chunk 64KiB", `"sendfile_max_chunk": 65536`},
		{"sendfile_max_chunk 1GiB", `"sendfile_max_chunk": 1073741824`},
		{"prewarm *\n\t\tprewarm_workers 1\n\t\tkeep_hot 1s", `"prewarm": ["*"], "prewarm_workers": 1, "keep_hot": 1000000000`},
		{"prewarm *\n\t\tprewarm_workers 64", `"prewarm": ["*"], "prewarm_workers": 64`},
		{"prewarm *\n\t\tprewarm_busy_rate 1", `"prewarm": ["*"], "prewarm_busy_rate": 1`},
		{"stat_workers 1\n\t\tmax_watches 1\n\t\tmax_dir_entries 1\n\t\tmax_open_files 1", `"stat_workers": 1, "max_watches": 1, "max_dir_entries": 1, "max_open_files": 1`},
		{"negative_cache 0\n\t\tmax_ranges 0\n\t\tlimit_rate 1\n\t\tmax_transfers 1 queue 0s", `"negative_cache": 0, "max_ranges": 0, "limit_rate": {"rate": 1}, "max_transfers": {"limit": 1}`},
		{"status 100", `"status_code": 999`},
		{"prewarm *\n\t\tprewarm_budget 2TiB\n\t\tmemory_cache 0 max_file 0", `"prewarm": ["*"], "prewarm_budget": 2199023255552, "memory_cache": {"budget": 0}`},
	} {
		var fsrv FlashServe
		if err := json.Unmarshal([]byte("{"+c.json+"}"), &fsrv); err != nil {
			t.Fatal(err)
		}
		if err := fsrv.checkSettings(); err != nil {
			t.Errorf("JSON %s: refused: %v", c.json, err)
		}
		adapted := adaptForTest(siteWith(c.caddyfile))
		if strings.HasPrefix(adapted, "error: ") {
			t.Errorf("Caddyfile %q: %s", c.caddyfile, adapted)
			continue
		}
		var cfg struct {
			Apps struct {
				HTTP struct {
					Servers map[string]struct {
						Routes []struct {
							Handle []json.RawMessage `json:"handle"`
						} `json:"routes"`
					} `json:"servers"`
				} `json:"http"`
			} `json:"apps"`
		}
		if err := json.Unmarshal([]byte(adapted), &cfg); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, srv := range cfg.Apps.HTTP.Servers {
			for _, r := range srv.Routes {
				for _, h := range r.Handle {
					var fsrv FlashServe
					if json.Unmarshal(h, &fsrv) == nil && strings.Contains(string(h), `"flash_serve"`) {
						found = true
						if err := fsrv.checkSettings(); err != nil {
							t.Errorf("Caddyfile %q: refused: %v", c.caddyfile, err)
						}
					}
				}
			}
		}
		if !found {
			t.Errorf("Caddyfile %q: no flash_serve handler in %s", c.caddyfile, adapted)
		}
	}
}

// TestCaddyfileRefusesExplicitZeroDefault: where JSON's 0 means "the
// default", an explicit 0 in the Caddyfile is refused by the parser, since
// `revalidate 0` reads as "always" and would silently be 60s.
func TestCaddyfileRefusesExplicitZeroDefault(t *testing.T) {
	for _, sub := range []string{"stat_workers", "max_open_files", "max_watches", "max_dir_entries",
		"revalidate", "sendfile_max_chunk", "prewarm_budget", "prewarm_workers", "prewarm_busy_rate", "keep_hot"} {
		got := adaptForTest(siteWith("prewarm *\n\t\t" + sub + " 0"))
		want := fmt.Sprintf("`%s 0` would mean the default; leave it out", sub)
		if !strings.HasPrefix(got, "error: ") || !strings.Contains(got, want) {
			t.Errorf("%s 0: got %s, want an error containing %q", sub, got, want)
		}
	}
}

// TestValidateRunsWhenCaddyLoadsJSON: caddy.Load of a JSON config with a
// value the Caddyfile parser never saw is refused, and nothing is left
// running.
func TestValidateRunsWhenCaddyLoadsJSON(t *testing.T) {
	cfg := `{"admin": {"disabled": true}, "apps": {"http": {"servers": {"s": {"listen": ["127.0.0.1:0"],
		"routes": [{"handle": [{"handler": "flash_serve", "root": "` + t.TempDir() + `", "sendfile_max_chunk": 1}]}]}}}}}`
	err := caddy.Load([]byte(cfg), true)
	t.Cleanup(func() { caddy.Stop() })
	want := "sendfile_max_chunk: need 64KiB to 1GiB, got 1 byte"
	if err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("caddy.Load: got %v, want an error ending in %q", err, want)
	}
}

// TestProvisionRefusesBeforeStarting: Caddy provisions a handler before
// it validates it, so Provision must refuse a bad value before it builds
// a cache or starts prewarm workers.
func TestProvisionRefusesBeforeStarting(t *testing.T) {
	fsrv := &FlashServe{Prewarm: []string{"*"}, PrewarmWorkers: 100000}
	err := fsrv.Provision(caddy.Context{})
	if err == nil || err.Error() != "prewarm_workers: need 1 to 64, got 100000" {
		t.Fatalf("Provision: got %v", err)
	}
	if fsrv.cache != nil || fsrv.prewarm != nil || fsrv.cleanupOnce != nil {
		t.Fatalf("Provision built state before refusing: cache %v, prewarm %v", fsrv.cache != nil, fsrv.prewarm != nil)
	}
	if err := fsrv.Cleanup(); err != nil {
		t.Fatalf("Cleanup after a refused Provision: %v", err)
	}
}
