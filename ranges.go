package flashserve

import (
	"errors"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
)

// byteRange is one satisfiable part of a representation: the bytes
// [start, start+length). A byteRange never has length 0.
type byteRange struct {
	start, length int64
}

func (r byteRange) end() int64 { return r.start + r.length }

// appendContentRange appends the Content-Range value of r for a
// representation of the given size (RFC 9110 §14.4), e.g. "bytes 0-9/100".
func (r byteRange) appendContentRange(b []byte, size int64) []byte {
	b = append(b, "bytes "...)
	b = strconv.AppendInt(b, r.start, 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, r.end()-1, 10)
	b = append(b, '/')
	return strconv.AppendInt(b, size, 10)
}

func (r byteRange) contentRange(size int64) string {
	var buf [64]byte
	return string(r.appendContentRange(buf[:0], size))
}

// The error texts are net/http's, so that a 416 body is byte-for-byte the
// one file_server sends.
var (
	errInvalidRange = errors.New("invalid range")
	errNoOverlap    = errors.New("invalid range: failed to overlap")
)

// parseRangeAtMost parses a Range header value against a representation
// of the given size (RFC 9110 §14.1.1 and §14.2), appending to dst, in the
// client's order, at most keep satisfiable ranges (all when keep < 0) and
// only checking the syntax of the rest, so that a header of 100,000 ranges
// costs no more memory than one of keep: the caller passes max_ranges+1,
// enough for limitRanges to see that there are too many.
//
// It answers as net/http does (and so as file_server does), with two
// deliberate exceptions that follow RFC 9110 §14.1.1 instead:
//   - a suffix range of length 0 ("-0") is unsatisfiable, where net/http
//     answers it with an empty 206 whose Content-Range ends before it starts;
//   - no range of length 0 is ever produced, so an empty representation has no
//     satisfiable range and is served whole (net/http answers "bytes=-5" on an
//     empty file with the impossible "bytes 0--1/0").
//
// A syntax error gives errInvalidRange. A well-formed set with no
// satisfiable range gives errNoOverlap.
func parseRangeAtMost(s string, size int64, dst []byteRange, keep int) ([]byteRange, error) {
	if s == "" {
		return dst, nil
	}
	// Why not ignore an unknown unit, as RFC 9110 §14.2 allows? Because
	// net/http answers it with 416, and clients of file_server see that.
	const unit = "bytes="
	if !strings.HasPrefix(s, unit) {
		return dst, errInvalidRange
	}
	noOverlap := false
	base := len(dst)
	specs := s[len(unit):]
	for specs != "" {
		var spec string
		spec, specs, _ = strings.Cut(specs, ",")
		spec = textproto.TrimString(spec)
		if spec == "" {
			continue
		}
		first, last, ok := strings.Cut(spec, "-")
		if !ok {
			return dst, errInvalidRange
		}
		first, last = textproto.TrimString(first), textproto.TrimString(last)
		var r byteRange
		if first == "" {
			// suffix-range: the last N bytes.
			if last == "" || last[0] == '-' {
				return dst, errInvalidRange
			}
			n, err := strconv.ParseInt(last, 10, 64)
			if err != nil || n < 0 {
				return dst, errInvalidRange
			}
			n = min(n, size)
			if n == 0 {
				noOverlap = true
				continue
			}
			r = byteRange{start: size - n, length: n}
		} else {
			start, err := strconv.ParseInt(first, 10, 64)
			if err != nil || start < 0 {
				return dst, errInvalidRange
			}
			if start >= size {
				// Checked before last-pos is parsed, as net/http does, so
				// that "200-100" on 100 bytes is unsatisfiable, not invalid.
				noOverlap = true
				continue
			}
			end := size - 1
			if last != "" {
				e, err := strconv.ParseInt(last, 10, 64)
				if err != nil || e < start {
					return dst, errInvalidRange
				}
				end = min(e, size-1)
			}
			r = byteRange{start: start, length: end - start + 1}
		}
		if keep < 0 || len(dst)-base < keep {
			dst = append(dst, r)
		}
	}
	if noOverlap && len(dst) == 0 {
		return dst, errNoOverlap
	}
	return dst, nil
}

// limitRanges applies the defences against range abuse (CVE-2011-3192,
// RFC 9110 §14.3 and §17.15) to the ranges of one request. It reports
// false when the request must be answered as if it had no Range header:
// more than maxRanges ranges, or ranges whose lengths add up to more than
// the representation (net/http does this too). Otherwise it returns the
// ranges sorted by start with overlapping ranges merged, so that no byte is
// sent twice; ranges that only touch are kept apart, as file_server does.
func limitRanges(ranges []byteRange, size int64, maxRanges int) ([]byteRange, bool) {
	if len(ranges) > maxRanges {
		return nil, false
	}
	var sum int64
	for _, r := range ranges {
		sum += r.length
	}
	if sum > size {
		return nil, false
	}
	if len(ranges) < 2 {
		return ranges, true
	}
	ordered := true
	for i := 1; i < len(ranges); i++ {
		if ranges[i].start < ranges[i-1].end() {
			ordered = false
			break
		}
	}
	if ordered {
		return ranges, true
	}
	slices.SortFunc(ranges, func(a, b byteRange) int {
		switch {
		case a.start < b.start:
			return -1
		case a.start > b.start:
			return 1
		}
		return 0
	})
	out := ranges[:1]
	for _, r := range ranges[1:] {
		last := &out[len(out)-1]
		if r.start < last.end() {
			last.length = max(last.end(), r.end()) - last.start
			continue
		}
		out = append(out, r)
	}
	return out, true
}
