package flashserve

import (
	"net/http"
	"net/textproto"
	"strings"
	"time"
)

// precondition is the outcome of evaluating a request's preconditions.
type precondition int

const (
	// proceed: serve the representation (honouring rangeHeader).
	proceed precondition = iota
	// notModified: answer 304 (only for GET and HEAD).
	notModified
	// preconditionFailed: answer 412.
	preconditionFailed
)

// condResult is the value of one conditional header: absent, true or false.
type condResult int

const (
	condNone condResult = iota
	condTrue
	condFalse
)

// validators are what a response's preconditions are evaluated against.
type validators struct {
	// etag is the entity tag the response will carry, "" if none.
	etag string
	// modTime is the last-modification time, zero if it is not useful.
	modTime time.Time
}

// checkPreconditions evaluates the conditional headers in the order of RFC
// 9110 §13.2.2, and returns the Range header that still applies after
// If-Range (§13.1.5), or "". As net/http does, so that clients see what
// file_server answers: If-Modified-Since and If-Range are ignored for
// methods other than GET and HEAD, and a matching If-None-Match fails
// those with 412 instead of 304.
func checkPreconditions(h http.Header, method string, v validators) (precondition, string) {
	safe := method == http.MethodGet || method == http.MethodHead
	c := checkIfMatch(headerValue(h, "If-Match"), v.etag)
	if c == condNone {
		if modified, ok := modifiedSince(headerValue(h, "If-Unmodified-Since"), v.modTime); ok && modified {
			c = condFalse
		}
	}
	if c == condFalse {
		return preconditionFailed, ""
	}
	switch checkIfNoneMatch(headerValue(h, "If-None-Match"), v.etag) {
	case condFalse:
		if safe {
			return notModified, ""
		}
		return preconditionFailed, ""
	case condNone:
		if modified, ok := modifiedSince(headerValue(h, "If-Modified-Since"), v.modTime); safe && ok && !modified {
			return notModified, ""
		}
	}
	rangeHeader := headerValue(h, "Range")
	if rangeHeader != "" && safe && checkIfRange(headerValue(h, "If-Range"), v) == condFalse {
		rangeHeader = ""
	}
	return proceed, rangeHeader
}

// headerValue is h.Get for a key that is already canonical: it skips the
// canonicalisation, which the hot path would otherwise pay for on every
// request.
func headerValue(h http.Header, canonicalKey string) string {
	if v := h[canonicalKey]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// scanETag returns the entity tag at the start of s (RFC 9110 §8.8.3) and
// what follows it, or "" if s does not start with a valid one.
func scanETag(s string) (etag, rest string) {
	s = textproto.TrimString(s)
	start := 0
	if strings.HasPrefix(s, "W/") {
		start = 2
	}
	if len(s)-start < 2 || s[start] != '"' {
		return "", ""
	}
	for i := start + 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return s[:i+1], s[i+1:]
		case c == 0x21 || c >= 0x23 && c <= 0x7e || c >= 0x80:
		default:
			return "", ""
		}
	}
	return "", ""
}

// strongMatch is the strong comparison of RFC 9110 §8.8.3.2: both tags
// are strong and identical.
func strongMatch(a, b string) bool {
	return a == b && a != "" && a[0] == '"'
}

// weakMatch is the weak comparison of RFC 9110 §8.8.3.2: the opaque tags
// are identical, whatever their W/ prefixes.
func weakMatch(a, b string) bool {
	return strings.TrimPrefix(a, "W/") == strings.TrimPrefix(b, "W/")
}

// matchList walks a comma-separated list of entity tags (or "*") and
// reports whether any matches etag with the given comparison. A malformed
// member ends the walk, as it does in net/http.
func matchList(list, etag string, match func(a, b string) bool) bool {
	for {
		list = textproto.TrimString(list)
		if list == "" {
			return false
		}
		if list[0] == ',' {
			list = list[1:]
			continue
		}
		if list[0] == '*' {
			return true
		}
		tag, rest := scanETag(list)
		if tag == "" {
			return false
		}
		if match(tag, etag) {
			return true
		}
		list = rest
	}
}

// checkIfMatch evaluates If-Match (RFC 9110 §13.1.1) with strong comparison.
func checkIfMatch(im, etag string) condResult {
	if im == "" {
		return condNone
	}
	if matchList(im, etag, strongMatch) {
		return condTrue
	}
	return condFalse
}

// checkIfNoneMatch evaluates If-None-Match (RFC 9110 §13.1.2) with weak
// comparison. condFalse means a tag matched.
func checkIfNoneMatch(inm, etag string) condResult {
	if inm == "" {
		return condNone
	}
	if matchList(inm, etag, weakMatch) {
		return condFalse
	}
	return condTrue
}

// modifiedSince reports whether modTime is after the HTTP date, compared
// to the second as Last-Modified is sent (If-Modified-Since, RFC 9110
// §13.1.3; If-Unmodified-Since, §13.1.4). ok is false when there is no
// date, no useful modTime, or an unparsable date, which the RFC says to
// ignore.
func modifiedSince(date string, modTime time.Time) (modified, ok bool) {
	if date == "" || isZeroTime(modTime) {
		return false, false
	}
	t, err := http.ParseTime(date)
	if err != nil {
		return false, false
	}
	return modTime.Truncate(time.Second).Compare(t) > 0, true
}

// checkIfRange evaluates If-Range (RFC 9110 §13.1.5): an entity tag must
// match strongly, a date must equal Last-Modified to the second.
func checkIfRange(ir string, v validators) condResult {
	if ir == "" {
		return condNone
	}
	if tag, _ := scanETag(ir); tag != "" {
		if strongMatch(tag, v.etag) {
			return condTrue
		}
		return condFalse
	}
	if v.modTime.IsZero() {
		return condFalse
	}
	t, err := http.ParseTime(ir)
	if err != nil {
		return condFalse
	}
	if t.Unix() == v.modTime.Unix() {
		return condTrue
	}
	return condFalse
}

var unixEpoch = time.Unix(0, 0)

// isZeroTime reports whether t carries no information: zero or the epoch.
func isZeroTime(t time.Time) bool {
	return t.IsZero() || t.Equal(unixEpoch)
}
