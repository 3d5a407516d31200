package statacc

import (
	"io/fs"
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// fixedInfo is an fs.FileInfo with a given size and mtime, for headers
// no file on this machine's filesystems can have.
type fixedInfo struct {
	size int64
	mod  time.Time
}

func (i fixedInfo) Name() string       { return "f.html" }
func (i fixedInfo) Size() int64        { return i.size }
func (i fixedInfo) Mode() fs.FileMode  { return 0o644 }
func (i fixedInfo) ModTime() time.Time { return i.mod }
func (i fixedInfo) IsDir() bool        { return false }
func (i fixedInfo) Sys() any           { return nil }

// TestHeaderValuesOfExtremeSizesAndTimes: the ETag, Last-Modified and
// Content-Length an entry gives are file_server's for the largest size
// and for mtimes far in the past and the future (a year with 12 digits,
// a negative one, UnixNano out of range), where the three values are
// longest: they are kept in one string whose length is a byte.
func TestHeaderValuesOfExtremeSizesAndTimes(t *testing.T) {
	times := []time.Time{
		time.Unix(1700000000, 123456789),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Unix(math.MaxInt64/2, 999999999),
		time.Unix(-math.MaxInt64/2, 999999999),
		time.Unix(math.MaxInt64, 999999999),
		time.Unix(math.MinInt64, 0),
		time.Unix(-62135596801, 0), // the year 0
	}
	for _, size := range []int64{0, 1, math.MaxInt64} {
		for _, mt := range times {
			e := newEntry("/srv/f.html", fixedInfo{size: size, mod: mt})
			wantETag := `"` + strconv.FormatInt(mt.UnixNano(), 36) + "-" + strconv.FormatInt(size, 36) + `"`
			if got := e.ETag(); got != wantETag {
				t.Errorf("size %d, mtime %v: ETag %q, want %q", size, mt, got, wantETag)
			}
			if got, want := e.LastModified(), mt.UTC().Format(http.TimeFormat); got != want {
				t.Errorf("size %d, mtime %v: Last-Modified %q, want %q", size, mt, got, want)
			}
			if got, want := e.Length(), strconv.FormatInt(size, 10); got != want {
				t.Errorf("size %d, mtime %v: Content-Length %q, want %q", size, mt, got, want)
			}
		}
	}
}
