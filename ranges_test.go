package flashserve

import (
	"errors"
	"slices"
	"testing"
)

func TestParseRange(t *testing.T) {
	const size = 100
	tests := []struct {
		name   string
		header string
		want   []byteRange
		err    error
	}{
		{"absent", "", nil, nil},
		{"first bytes (RFC 9110 §14.1.2)", "bytes=0-9", []byteRange{{0, 10}}, nil},
		{"open-ended", "bytes=90-", []byteRange{{90, 10}}, nil},
		{"last-pos past the end is clamped (§14.1.2)", "bytes=95-1000", []byteRange{{95, 5}}, nil},
		{"suffix (§14.1.2)", "bytes=-10", []byteRange{{90, 10}}, nil},
		{"suffix longer than the file is the whole file", "bytes=-1000", []byteRange{{0, 100}}, nil},
		{"several, with spaces and an empty member", "bytes= 0-0 , ,5-6", []byteRange{{0, 1}, {5, 2}}, nil},
		{"unsatisfiable start (§14.1.1)", "bytes=100-", nil, errNoOverlap},
		{"unsatisfiable start, last-pos not parsed, as net/http", "bytes=200-100", nil, errNoOverlap},
		{"zero-length suffix is unsatisfiable (§14.1.1)", "bytes=-0", nil, errNoOverlap},
		{"one satisfiable among unsatisfiable", "bytes=200-,0-0", []byteRange{{0, 1}}, nil},
		{"last-pos before first-pos is invalid (§14.1.1)", "bytes=5-1", nil, errInvalidRange},
		{"other unit", "items=0-1", nil, errInvalidRange},
		{"no dash", "bytes=5", nil, errInvalidRange},
		{"not a number", "bytes=a-b", nil, errInvalidRange},
		{"negative suffix", "bytes=--5", nil, errInvalidRange},
		{"empty suffix", "bytes=-", nil, errInvalidRange},
		{"overflow", "bytes=0-99999999999999999999", nil, errInvalidRange},
		{"empty set", "bytes=", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseRange(tt.header, size, nil)
			if !errors.Is(err, tt.err) {
				t.Fatalf("parseRange(%q) error = %v, want %v", tt.header, err, tt.err)
			}
			if err == nil && !slices.Equal(got, tt.want) {
				t.Fatalf("parseRange(%q) = %v, want %v", tt.header, got, tt.want)
			}
		})
	}
}

func TestParseRangeEmptyFile(t *testing.T) {
	// An empty representation has no byte to select: every range is
	// unsatisfiable, and decide then serves the file whole.
	for _, h := range []string{"bytes=0-", "bytes=-5", "bytes=0-0"} {
		if got, err := parseRange(h, 0, nil); !errors.Is(err, errNoOverlap) {
			t.Errorf("parseRange(%q, 0) = %v, %v; want errNoOverlap", h, got, err)
		}
	}
}

func TestLimitRanges(t *testing.T) {
	tests := []struct {
		name string
		in   []byteRange
		max  int
		want []byteRange
		ok   bool
	}{
		{"ordered ranges are kept as asked", []byteRange{{0, 10}, {20, 10}}, 16, []byteRange{{0, 10}, {20, 10}}, true},
		{"touching ranges stay apart, as file_server sends them", []byteRange{{0, 10}, {10, 10}}, 16, []byteRange{{0, 10}, {10, 10}}, true},
		{"out of order is sorted (RFC 9110 §14.3)", []byteRange{{20, 10}, {0, 10}}, 16, []byteRange{{0, 10}, {20, 10}}, true},
		{"overlap is merged (CVE-2011-3192)", []byteRange{{0, 10}, {5, 10}}, 16, []byteRange{{0, 15}}, true},
		{"contained range is absorbed", []byteRange{{0, 50}, {10, 5}, {60, 1}}, 16, []byteRange{{0, 50}, {60, 1}}, true},
		{"more than max_ranges: whole file", []byteRange{{0, 1}, {2, 1}, {4, 1}}, 2, nil, false},
		{"sum larger than the file: whole file", []byteRange{{0, 60}, {0, 60}}, 16, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := limitRanges(slices.Clone(tt.in), 100, tt.max)
			if ok != tt.ok || !slices.Equal(got, tt.want) {
				t.Fatalf("limitRanges(%v) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestContentRange(t *testing.T) {
	if got := (byteRange{start: 5, length: 10}).contentRange(100); got != "bytes 5-14/100" {
		t.Fatalf("contentRange = %q", got)
	}
}

// parseRange is parseRangeAtMost keeping every range.
func parseRange(s string, size int64, dst []byteRange) ([]byteRange, error) {
	return parseRangeAtMost(s, size, dst, -1)
}
