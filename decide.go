package flashserve

import (
	"encoding/hex"
	"math/rand/v2"
	"net/http"
	"strconv"
)

// plan is the decision step's outcome: what the response carries, its
// headers already set. Allocated once per response, it also backs the
// header values the handler sets (value), since handlers write into the
// slices they find in the header map (hdr[k][i] = ...), and one shared
// between responses would carry an edit into every later one.
type plan struct {
	status int
	// ranges are the parts to send; nil means the whole body.
	ranges []byteRange
	// length is the number of body bytes (the Content-Length).
	length int64
	// boundary is set for a multipart/byteranges body.
	boundary string
	// partType is the Content-Type inside each part of a multipart body.
	partType string
	// errorText, when set, is the whole body of an error response.
	errorText string
	// noBody is set for 304 and 412.
	noBody bool
	// rangeBuf backs ranges for requests with few of them, so parsing
	// allocates nothing.
	rangeBuf [2]byteRange
	// values backs the one-value header slices handed out by value; a
	// 200 uses 6 of them (7 with a sidecar, 8 with one range).
	values  [8]string
	nvalues int
}

// value returns v as a header value of this response: a slice of length
// and capacity 1 carved from the plan, so that appending to it copies and
// writing into it changes this response alone.
func (p *plan) value(v string) []string {
	if p.nvalues == len(p.values) {
		return []string{v} // more headers than a response usually sets
	}
	i := p.nvalues
	p.nvalues++
	p.values[i] = v
	return p.values[i : i+1 : i+1]
}

// addValue adds v to the values of the header key, as http.Header.Add
// does, without writing into the slice already there: an earlier handler
// may share it with other responses.
func (p *plan) addValue(h http.Header, key, v string) {
	old := h[key]
	if len(old) == 0 {
		h[key] = p.value(v)
		return
	}
	vs := make([]string, len(old)+1)
	copy(vs, old)
	vs[len(old)] = v
	h[key] = vs
}

// decide sets the response headers from the resolved representation and
// the request's conditional and Range headers (RFC 9110 §13 and §14), and
// fills in the status and body plan. It is net/http's serveContent made
// into a pure step, so that transmission can be replaced.
func decide(p *plan, h http.Header, r *http.Request, res *resolved, maxRanges int) {
	if res.etag != "" {
		h["Etag"] = p.value(res.etag)
	}
	if headerValue(h, "Content-Type") == "" {
		if ct := res.entry.ContentType(); ct != "" {
			h["Content-Type"] = p.value(ct)
		} else {
			// An explicit nil (no type known) stops net/http from sniffing.
			h["Content-Type"] = nil
		}
	}
	if res.entry.LastModified() != "" {
		h["Last-Modified"] = p.value(res.entry.LastModified())
	}
	v := validators{etag: res.etag, modTime: res.entry.ModTime()}
	cond, rangeHeader := checkPreconditions(r.Header, r.Method, v)
	switch cond {
	case notModified:
		// RFC 9110 §15.4.5: no representation metadata, except what guides
		// caches; Last-Modified is dropped when an ETag is there.
		delete(h, "Content-Type")
		delete(h, "Content-Length")
		delete(h, "Content-Encoding")
		if headerValue(h, "Etag") != "" {
			delete(h, "Last-Modified")
		}
		p.status, p.noBody = http.StatusNotModified, true
		return
	case preconditionFailed:
		delete(h, "Content-Length")
		p.status, p.noBody = http.StatusPreconditionFailed, true
		return
	}

	size := res.body.Size()
	p.status = http.StatusOK
	p.length = size
	if maxRanges == 0 {
		h["Accept-Ranges"] = p.value("none")
		h["Content-Length"] = p.value(res.body.Length())
		return
	}

	ranges, err := parseRangeAtMost(rangeHeader, size, p.rangeBuf[:0], maxRanges+1)
	switch err {
	case nil:
	case errNoOverlap:
		if size == 0 {
			// Some clients send a Range with every request; an empty file
			// is served whole rather than refused (net/http does the same).
			ranges = nil
			break
		}
		h["Content-Range"] = p.value("bytes */" + res.body.Length())
		fallthrough
	default:
		rangeError(p, h, err)
		return
	}
	ranges, ok := limitRanges(ranges, size, maxRanges)
	if !ok {
		ranges = nil
	}

	switch {
	case len(ranges) == 1:
		// RFC 9110 §14.2: one range is never sent as multipart.
		p.status = http.StatusPartialContent
		p.ranges = ranges
		p.length = ranges[0].length
		h["Content-Range"] = p.value(ranges[0].contentRange(size))
	case len(ranges) > 1:
		p.status = http.StatusPartialContent
		p.ranges = ranges
		if ct := h["Content-Type"]; len(ct) > 0 {
			p.partType = ct[0]
		}
		p.boundary = newBoundary()
		p.length = multipartLength(ranges, p.boundary, p.partType, size)
		h["Content-Type"] = p.value("multipart/byteranges; boundary=" + p.boundary)
	}
	h["Accept-Ranges"] = p.value("bytes")
	if p.ranges == nil {
		h["Content-Length"] = p.value(res.body.Length())
	} else {
		h["Content-Length"] = p.value(strconv.FormatInt(p.length, 10))
	}
}

// rangeError prepares a 416 with net/http's text body, dropping the
// validators and the encoding, which describe a representation that is not
// sent.
func rangeError(p *plan, h http.Header, err error) {
	for _, k := range []string{"Cache-Control", "Content-Encoding", "Etag", "Last-Modified", "Content-Length"} {
		delete(h, k)
	}
	h["Content-Type"] = p.value("text/plain; charset=utf-8")
	h["X-Content-Type-Options"] = p.value("nosniff")
	p.status, p.errorText = http.StatusRequestedRangeNotSatisfiable, err.Error()+"\n"
}

// newBoundary returns a random multipart boundary of 60 hex digits, the
// shape mime/multipart uses. It need not be secret, only absent from the
// file, which 240 random bits make certain in practice.
func newBoundary() string {
	var raw [30]byte
	for i := 0; i < len(raw); i += 8 {
		u := rand.Uint64()
		for j := 0; j < 8 && i+j < len(raw); j++ {
			raw[i+j] = byte(u >> (8 * j))
		}
	}
	return hex.EncodeToString(raw[:])
}

// appendPartHeader appends the delimiter and headers that precede part i of
// a multipart/byteranges body (RFC 9110 §14.6), exactly as mime/multipart
// writes them: the first delimiter has no leading CRLF, and the headers
// come in sorted order.
func appendPartHeader(b []byte, i int, r byteRange, boundary, partType string, size int64) []byte {
	if i > 0 {
		b = append(b, "\r\n"...)
	}
	b = append(b, "--"...)
	b = append(b, boundary...)
	b = append(b, "\r\nContent-Range: "...)
	b = r.appendContentRange(b, size)
	b = append(b, "\r\nContent-Type: "...)
	b = append(b, partType...)
	return append(b, "\r\n\r\n"...)
}

// appendMultipartEnd appends the close delimiter of a multipart body.
func appendMultipartEnd(b []byte, boundary string) []byte {
	b = append(b, "\r\n--"...)
	b = append(b, boundary...)
	return append(b, "--\r\n"...)
}

// multipartLength is the exact length of a multipart/byteranges body.
func multipartLength(ranges []byteRange, boundary, partType string, size int64) int64 {
	var buf [256]byte
	var n int64
	for i, r := range ranges {
		n += int64(len(appendPartHeader(buf[:0], i, r, boundary, partType, size))) + r.length
	}
	return n + int64(len(appendMultipartEnd(buf[:0], boundary)))
}
