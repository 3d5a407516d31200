// Package statacc resolves filesystem paths to Entries: what a response
// needs to know about a file, computed once.
package statacc

import (
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Entry is what serving one filesystem path needs, computed when the path
// is resolved so that a response only copies strings.
type Entry struct {
	// Path is the filesystem path the entry describes.
	Path string
	// Size is the file size in bytes.
	Size int64
	// Mode is the file's mode; IsDir and IsRegular derive from it.
	Mode fs.FileMode
	// ModTime is the modification time, or the zero time when it carries
	// no information (the epoch, or 1 s after it, as some build tools set).
	ModTime time.Time
	// ETag is file_server's strong validator: the mtime in nanoseconds and
	// the size, both in base 36. "" when ModTime is zero.
	ETag string
	// LastModified is ModTime formatted for the header, "" when zero.
	LastModified string
	// ContentType comes from the extension; "" means no Content-Type at all,
	// because sniffing the body is never done.
	ContentType string
}

// IsDir reports whether the entry is a directory.
func (e *Entry) IsDir() bool { return e.Mode.IsDir() }

// IsRegular reports whether the entry is a regular file.
func (e *Entry) IsRegular() bool { return e.Mode.IsRegular() }

// NewEntry derives an Entry from a path and its FileInfo.
func NewEntry(path string, info fs.FileInfo) *Entry {
	e := &Entry{
		Path: path,
		Size: info.Size(),
		Mode: info.Mode(),
	}
	if mt := info.ModTime(); UsefulModTime(mt) {
		e.ModTime = mt
		e.ETag = ETag(mt, e.Size)
		e.LastModified = mt.UTC().Format(http.TimeFormat)
	}
	if !e.Mode.IsDir() {
		e.ContentType = mime.TypeByExtension(filepath.Ext(path))
	}
	return e
}

// Stat resolves path with one stat(2), following symlinks, as file_server
// does.
func Stat(path string) (*Entry, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	return NewEntry(path, info), nil
}

// UsefulModTime reports whether a modification time can serve as a
// validator. Tools that make reproducible builds set it to the epoch or
// one second after it; such a time says nothing about the content.
func UsefulModTime(t time.Time) bool {
	u := t.Unix()
	return u != 0 && u != 1
}

// ETag returns the strong entity tag file_server computes for a file, so
// that caches stay valid when a site switches between the two handlers.
func ETag(modTime time.Time, size int64) string {
	var buf [48]byte
	b := append(buf[:0], '"')
	b = strconv.AppendInt(b, modTime.UnixNano(), 36)
	b = append(b, '-')
	b = strconv.AppendInt(b, size, 36)
	b = append(b, '"')
	return string(b)
}
