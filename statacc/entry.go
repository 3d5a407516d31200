// Package statacc resolves filesystem paths to Entries: what a response
// needs to know about a file, computed once.
package statacc

import (
	"io"
	"io/fs"
	"mime"
	"net/http"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"
	"unique"
	"unsafe"

	"github.com/flashserve/caddy-flash-serve/internal/hotset"
)

// meta is what serving one filesystem path needs, computed when the path
// is resolved so that a response only copies strings. It is what the
// cache keeps for a path, shared by every request for it and never changed
// once published: data, the only shared bytes, must be copied before it
// reaches a writer. A body is either data or read from the file when sent,
// never the one spliced with the other. A regular file's meta outlives its
// descriptor: the descriptor clock closes one (open becomes nil) and keeps
// the meta, whose next hit opens the file again (Cache.reopen), or is
// served from data without a descriptor if the meta has data.
//
// There is one per cached path, so its size counts (issue #33): newEntry
// allocates it with its first Entry, in the 192-byte size class
// (TestEntryLayout). Strings many entries share are interned handles,
// facts set before publication share one byte (flags), times that only
// need to be recent are 4-byte stamps.
type meta struct {
	path string
	size int64
	// modSec and modNsec are the mtime, modSec 0 when it carries no
	// information (usefulModTime): 12 bytes where a time.Time takes 24.
	modSec int64
	// contentType is the interned Content-Type (ContentType), the zero
	// handle for none: 8 bytes where a string takes 16.
	contentType unique.Handle[string]
	// values points at the ETag, Last-Modified and Content-Length values,
	// one string of valuesEnd bytes cut at etagEnd and lmEnd (headerValues):
	// a pointer where three string headers took 48 bytes.
	values *byte
	// data is a small file's whole content kept in memory, nil if not.
	data []byte
	// open is the file open now with the cache's reference on it, nil
	// while a regular file's descriptor is closed; for a meta without a
	// descriptor (a directory), an Entry without a file, set once; for a
	// small file kept in memory (data), an Entry without a file once its
	// descriptor is closed (Cache.shut).
	open atomic.Pointer[Entry]
	// checked is the nanotime of the last stat (or in-place revalidation).
	checked atomic.Int64
	hot     hotset.Tally
	cache   *Cache
	// root is the root it was confined to, interned (all of a site's
	// entries share it), the zero handle ("") with SymlinksFollow.
	root unique.Handle[string]
	// dir is the watcher's node of the entry's directory, nil if unwatched.
	dir    *dirNode
	fileID uint64 // device and inode, mixed; 0 if unknown
	// marks are the CLOCK marks a hit sets: markEvict for the descriptors'
	// sweep, markIdle for the janitor's idle pass (Cache.closeIdle), markKeep
	// for the sweep of the entries themselves (MaxEntries).
	marks atomic.Uint32
	// gone is set when the entry has left the cache (Cache.drop).
	gone atomic.Bool
	// residentAt is when the whole file was last seen in the page cache,
	// probedAt when it was last looked for there, in stamps (0: never).
	residentAt, probedAt atomic.Uint32
	// fileMode is the file's mode; IsDir and IsRegular derive from it.
	fileMode fs.FileMode
	modNsec  int32
	flags    metaFlags
	watched  bool     // whether inotify watches the entry's directory
	symlinks Symlinks // the confinement it was resolved with
	// etagEnd and lmEnd are where values is cut, valuesEnd its length
	// (under 100 bytes: see describe).
	etagEnd, lmEnd, valuesEnd uint8
}

// metaFlags are facts about a meta's file, set before the meta is
// published (newEntry, Cache.build, Cache.record) and never after, so
// that they need no atomics and share one byte.
type metaFlags uint8

const (
	// flagTrusted: mincore tells this process the truth about the file's
	// pages (pagecache.Trusted).
	flagTrusted metaFlags = 1 << iota
	// flagReopenInline: the file is on a filesystem whose cached opens do
	// not block, so that a hit whose descriptor was closed opens it again
	// in the request (Cache.reopen).
	flagReopenInline
	// flagNoBlockDev: the file is on a filesystem without a block device.
	flagNoBlockDev
	// flagInMemoryFS: the file is on tmpfs or ramfs (InMemoryFS).
	flagInMemoryFS
	// flagOtherMount: the file is on another mount than its site's root;
	// its descriptor is closed once idle (Cache.closeIdle).
	flagOtherMount
)

// has reports whether every flag of f is set.
func (e *meta) has(f metaFlags) bool { return e.flags&f == f }

// setFlag sets or clears f; only before the meta is published.
func (e *meta) setFlag(f metaFlags, on bool) {
	if on {
		e.flags |= f
	} else {
		e.flags &^= f
	}
}

// Entry is a path's meta as one request holds it: with the descriptor
// open when the request got it, open until the request's Release, though
// the cache may have closed it for others meanwhile (Cache.reopen).
type Entry struct {
	*meta
	file fileRef // the open file of a regular-file entry, by value
	// refs counts the meta's reference (while it is the meta's open) plus
	// one per request; the descriptor closes at 0, never under a transfer.
	refs atomic.Int32
	// shut is set when the meta let go of this descriptor (Cache.shut).
	shut atomic.Bool
}

// interned is the handle of s, the zero one for "".
func interned(s string) unique.Handle[string] {
	if s == "" {
		return unique.Handle[string]{}
	}
	return unique.Make(s)
}

// valueOf is the string of an interned handle, "" for the zero one.
func valueOf(h unique.Handle[string]) string {
	if h == (unique.Handle[string]{}) {
		return ""
	}
	return h.Value()
}

// rootPath is the root the entry was confined to, "" with SymlinksFollow.
func (e *meta) rootPath() string { return valueOf(e.root) }

// Path is the filesystem path the entry describes.
func (e *meta) Path() string { return e.path }

// Size is the file size in bytes.
func (e *meta) Size() int64 { return e.size }

// ModTime is the modification time, or the zero time when it carries no
// information.
func (e *meta) ModTime() time.Time {
	if e.modSec == 0 {
		return time.Time{}
	}
	return time.Unix(e.modSec, int64(e.modNsec))
}

// ETag is file_server's strong validator, "" when ModTime is zero.
func (e *meta) ETag() string { return e.headerValues()[:e.etagEnd] }

// LastModified is ModTime for the Last-Modified header, "" when zero.
func (e *meta) LastModified() string { return e.headerValues()[e.etagEnd:e.lmEnd] }

// ContentType comes from the extension; "" means no Content-Type at all:
// the body is never sniffed.
func (e *meta) ContentType() string { return valueOf(e.contentType) }

// Length is Size in decimal: the Content-Length of the whole file.
func (e *meta) Length() string { return e.headerValues()[e.lmEnd:] }

// headerValues is the string values points at: the ETag, Last-Modified
// and Content-Length values, in this order.
func (e *meta) headerValues() string { return unsafe.String(e.values, int(e.valuesEnd)) }

// Data is the whole content of a small file kept in memory, nil if not.
// It is shared: copy it before it is passed to a writer.
func (e *meta) Data() []byte { return e.data }

// FileID identifies the file (device and inode mixed; 0 where unknown),
// for bounds that count per file rather than per descriptor.
func (e *meta) FileID() uint64 { return e.fileID }

// NoBlockDevice reports whether the file is on a filesystem without a
// block device (FUSE, NFS, tmpfs), for io_uring.
func (e *meta) NoBlockDevice() bool { return e.has(flagNoBlockDev) }

// residentFor is how long a file seen whole in the page cache is assumed
// to stay there, in stamps: a hot file is probed about once a second.
const residentFor = stamp(time.Second / stampUnit)

// stamp is a time of nanotime in milliseconds, in 4 bytes where an int64
// takes 8: it wraps after 49 days, and two are compared by their
// difference modulo 2^32, so that at worst a stamp 49 days old passes
// for a recent one, which costs a probe of the page cache more or less,
// never a wrong byte.
type stamp = uint32

const stampUnit = time.Millisecond

// stampNow is the stamp of now, never 0 (which says never).
func stampNow() stamp {
	if s := stamp(nanotime() / int64(stampUnit)); s != 0 {
		return s
	}
	return 1
}

// InMemoryFS reports whether the file is on tmpfs or ramfs: always in the
// page cache, no probe needed.
func (e *meta) InMemoryFS() bool { return e.has(flagInMemoryFS) }

// RecentlyResident reports whether the whole file was seen in the page
// cache within the last second.
func (e *meta) RecentlyResident() bool {
	at := e.residentAt.Load()
	return at != 0 && stampNow()-at < residentFor
}

// MarkResident records that the whole file is in the page cache now.
func (e *meta) MarkResident() { e.residentAt.Store(stampNow()) }

// ClaimProbe reports whether the caller should look for the whole file in
// the page cache now: true for one caller per second.
func (e *meta) ClaimProbe() bool {
	now := stampNow()
	last := e.probedAt.Load()
	// last may be ahead of now: another caller read the clock after this
	// one and claimed first. Within residentFor either way it is recent,
	// not 49 days old (which would claim again and move probedAt back).
	since := now - last
	return (last == 0 || since >= residentFor && since <= ^stamp(0)-residentFor) && e.probedAt.CompareAndSwap(last, now)
}

// MincoreTrusted reports whether mincore(2) tells which of the file's
// pages are cached: only if the process owned or could write the file at
// open. For others it reports every page resident.
func (e *meta) MincoreTrusted() bool { return e.has(flagTrusted) }

// File returns the open file of a regular-file entry, nil otherwise, for
// pread; open until the caller's reference is released.
func (e *Entry) File() io.ReaderAt {
	if !e.file.isOpen() {
		return nil
	}
	return (*entryFile)(e)
}

// FD returns the descriptor of File, or -1.
func (e *Entry) FD() int { return e.file.descriptor() }

// The marks of Entry.marks.
const (
	markEvict uint32 = 1 << iota
	markIdle
	markKeep
)

// markUsed sets every mark, for a hit: one store, as one flag costs.
func (e *meta) markUsed() { e.marks.Store(markEvict | markIdle | markKeep) }

// takeMark clears mark and reports whether it was set.
func (e *meta) takeMark(mark uint32) bool { return e.marks.And(^mark)&mark != 0 }

// acquire takes a reference unless the entry is already being closed.
func (e *Entry) acquire() bool {
	if !e.file.isOpen() {
		return true // nothing to keep open
	}
	for {
		n := e.refs.Load()
		if n <= 0 {
			return false
		}
		if e.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Hold takes one more reference on an entry the caller holds, for work
// that outlives the request (an io_uring read).
func (e *Entry) Hold() {
	if e.file.isOpen() {
		e.refs.Add(1)
	}
}

// Release gives back a reference taken by Cache.GetCounted or Hold.
func (e *Entry) Release() {
	if !e.file.isOpen() {
		return
	}
	if e.refs.Add(-1) == 0 {
		e.file.close()
		if c := e.cache; c != nil {
			c.counts[OpenFiles].Add(-1)
			if e.has(flagOtherMount) {
				c.otherMountFiles.Add(-1)
			}
		}
	}
}

// ReadAll returns a regular file's whole content, in a slice of the
// caller's own.
func (e *Entry) ReadAll() ([]byte, error) {
	if e.data != nil {
		return append([]byte(nil), e.data...), nil
	}
	if !e.IsRegular() {
		return nil, fs.ErrInvalid
	}
	if !e.file.isOpen() {
		return nil, fs.ErrInvalid
	}
	b := make([]byte, e.size)
	n, err := e.file.readAt(b, 0, e.path)
	if err == io.EOF && int64(n) == e.size {
		err = nil
	}
	return b[:n], err
}

// IsDir reports whether the entry is a directory.
func (e *meta) IsDir() bool { return e.fileMode.IsDir() }

// IsRegular reports whether the entry is a regular file.
func (e *meta) IsRegular() bool { return e.fileMode.IsRegular() }

// metaWithEntry is a meta with its first Entry, allocated together.
type metaWithEntry struct {
	m meta
	e Entry
}

// newEntry derives an Entry and its meta from a path and its FileInfo,
// in one allocation: a miss costs one object more than the meta alone.
func newEntry(path string, info fs.FileInfo) *Entry {
	both := &metaWithEntry{}
	both.e.meta = &both.m
	both.m.describe(path, info)
	return &both.e
}

// describe fills a new meta in from a path and its FileInfo.
func (e *meta) describe(path string, info fs.FileInfo) {
	e.path, e.size, e.fileMode = path, info.Size(), info.Mode()
	noBlockDev, fileID := fileIdentity(info)
	e.fileID = fileID
	e.setFlag(flagNoBlockDev, noBlockDev)
	// Header values cut from one string: one allocation, not three. It
	// is at most 2+13+1+13 bytes of ETag (int64 in base 36, twice), 29
	// of Last-Modified (37 past the year 9999) and 20 of Content-Length.
	var buf [96]byte
	b := buf[:0]
	etagEnd, lmEnd := 0, 0
	if mt := info.ModTime(); usefulModTime(mt) {
		e.modSec, e.modNsec = mt.Unix(), int32(mt.Nanosecond())
		b = appendStrongETag(b, mt, e.size)
		etagEnd = len(b)
		b = mt.UTC().AppendFormat(b, http.TimeFormat)
		lmEnd = len(b)
	}
	b = strconv.AppendInt(b, e.size, 10)
	values := string(b)
	e.values, e.valuesEnd = unsafe.StringData(values), uint8(len(values))
	e.etagEnd, e.lmEnd = uint8(etagEnd), uint8(lmEnd)
	if !e.fileMode.IsDir() {
		// Interned: the types are few, their entries many.
		if ct := mime.TypeByExtension(filepath.Ext(path)); ct != "" {
			e.contentType = unique.Make(ct)
		}
	}
}

// usefulModTime: reproducible builds set the mtime to the epoch or one
// second after it, which says nothing about the content.
func usefulModTime(t time.Time) bool {
	u := t.Unix()
	return u != 0 && u != 1
}

// appendStrongETag appends file_server's entity tag, so that caches stay
// valid when a site switches between the two handlers.
func appendStrongETag(b []byte, modTime time.Time, size int64) []byte {
	b = append(b, '"')
	b = strconv.AppendInt(b, modTime.UnixNano(), 36)
	b = append(b, '-')
	b = strconv.AppendInt(b, size, 36)
	return append(b, '"')
}

// sameAs reports whether a file whose identity (fileIdentity), size and
// mtime are given is the file e was made from: the same device and
// inode, size and mtime, as nginx's open_file_cache compares them before
// it trusts a cached node. Where the inode is not known it reports false.
func (e *meta) sameAs(id uint64, size int64, mt time.Time) bool {
	if id == 0 || id != e.fileID || size != e.size {
		return false
	}
	if usefulModTime(mt) {
		return mt.Unix() == e.modSec && int32(mt.Nanosecond()) == e.modNsec
	}
	return e.modSec == 0
}
