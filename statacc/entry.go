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

	"github.com/flashserve/caddy-flash-serve/internal/hotset"
)

// Entry is what serving one filesystem path needs, computed when the path
// is resolved so that a response only copies strings.
//
// An entry is shared by every request for its path and is never changed
// once published, but for its body (Data), let go when its last
// reference is released: its values are read through methods, header
// values are strings (a response puts them into slices of its own), and
// Data, the only shared bytes, must be copied before it reaches a writer,
// and be read only while a reference is held. Nothing else of a file's
// content is kept: a body is either Data, whole or in ranges of it, or
// read from the file when it is sent, never the one spliced with the
// other (the file may change with no event: a write through a shared
// mapping).
type Entry struct {
	// Fields are ordered so that the small ones share words, at the end.
	// The struct is 280 bytes on 64-bit platforms, in the 288-byte size
	// class (TestHeapPerEntry); the next class down, 256, is 24 bytes
	// away.
	path string
	size int64
	// modSec and modNsec are the mtime (modNsec at the end, with the
	// other small fields), modSec 0 when it carries no information (the
	// epoch, or 1 s after it, as some build tools set): 12 bytes where a
	// time.Time takes 24.
	modSec int64
	// etag, lastModified, contentType and length are the header values;
	// see their methods.
	etag, lastModified, contentType, length string
	// err is set on a negative entry: the error that looking the path up
	// gave, such as fs.ErrNotExist.
	err error
	// data is the whole content of a small file kept in memory, nil if
	// not; its length is what it holds against the memory budget.
	data []byte

	file handle // the open file of a regular-file entry
	fd   int    // file's descriptor, read once so Fd() is never called again
	// refs counts the cache's reference (while the entry is in the map)
	// plus one per request using the descriptor. The descriptor is closed
	// when it falls to 0, never while a transfer still reads from it.
	refs atomic.Int32
	// fileMode is the file's mode; IsDir and IsRegular derive from it.
	fileMode fs.FileMode
	// checked is the nanotime of the last stat; a negative entry's moves
	// on when it is revalidated in place (Cache.revalidateNegative).
	checked atomic.Int64
	// residentAt is the nanotime when the whole file was last seen in the
	// page cache, 0 if never; probedAt when it was last looked for there.
	residentAt, probedAt atomic.Int64
	// hot counts the requests that used the entry for the cache's hot set
	// (internal/hotset).
	hot   hotset.Tally
	cache *Cache
	root  string // the root it was confined to, "" with SymlinksFollow
	// dir is the watcher's node of the entry's directory, nil if unwatched.
	dir    *dirNode
	fileID uint64 // device and inode, mixed; 0 if unknown
	// trusted is set at open when mincore tells this process the truth
	// about the file's pages (pagecache.Trusted): it owns the file or may
	// write it.
	trusted bool
	watched bool // whether inotify watches the entry's directory
	// marks are the CLOCK marks a hit sets: markEvict, used since the
	// eviction sweep last passed; markIdle, used since the janitor's
	// last pass over the descriptors (Cache.closeIdle).
	marks atomic.Uint32
	// gone is set when the entry has left the cache (Cache.drop), so that
	// an eviction sweep skips it without a lookup in the map.
	gone     atomic.Bool
	symlinks Symlinks // the confinement it was resolved with
	// noBlockDev is set for a file on a filesystem without a block device.
	noBlockDev bool
	// inMemoryFS is set for a file on tmpfs or ramfs (InMemoryFS).
	inMemoryFS bool
	// otherMount is set for a descriptor on another mount than the root
	// of the site it was looked up for (Cache.onOtherMount): closed once
	// idle, so that the mount can be unmounted (Cache.closeIdle).
	otherMount bool
	modNsec    int32
}

// Path is the filesystem path the entry describes.
func (e *Entry) Path() string { return e.path }

// Size is the file size in bytes.
func (e *Entry) Size() int64 { return e.size }

// ModTime is the modification time, or the zero time when it carries no
// information (the epoch, or 1 s after it, as some build tools set).
func (e *Entry) ModTime() time.Time {
	if e.modSec == 0 {
		return time.Time{}
	}
	return time.Unix(e.modSec, int64(e.modNsec))
}

// ETag is file_server's strong validator: the mtime in nanoseconds and the
// size, both in base 36, quoted. "" when ModTime is zero.
func (e *Entry) ETag() string { return e.etag }

// LastModified is ModTime formatted for the Last-Modified header, "" when
// ModTime is zero.
func (e *Entry) LastModified() string { return e.lastModified }

// ContentType comes from the extension; "" means no Content-Type at all,
// because sniffing the body is never done.
func (e *Entry) ContentType() string { return e.contentType }

// Length is Size in decimal: the Content-Length of the whole file.
func (e *Entry) Length() string { return e.length }

// Data is the whole content of a small file kept in memory, nil if not.
// It is shared by every request and must not be written: copy it before
// it is passed to a writer, which may keep or change what it is given.
func (e *Entry) Data() []byte { return e.data }

// FileID identifies the file (its device and inode, mixed into one
// number; 0 where unknown), for bounds that count per file rather than
// per descriptor.
func (e *Entry) FileID() uint64 { return e.fileID }

// NoBlockDevice reports whether the file is on a filesystem without a
// block device (FUSE, NFS, tmpfs: a device number of major 0), from the
// stat made when the entry was built: io_uring submits its reads
// differently.
func (e *Entry) NoBlockDevice() bool { return e.noBlockDev }

// residentFor is how long a file seen whole in the page cache is assumed
// to stay there: long enough that a hot file is probed about once a
// second, short enough that memory pressure is noticed soon.
const residentFor = int64(time.Second)

// InMemoryFS reports whether the file is on a filesystem that keeps its
// files in memory (tmpfs, ramfs): it is always in the page cache, and a
// residency probe would only cost system calls.
func (e *Entry) InMemoryFS() bool { return e.inMemoryFS }

// RecentlyResident reports whether the whole file was seen in the page
// cache within the last second.
func (e *Entry) RecentlyResident() bool {
	at := e.residentAt.Load()
	return at != 0 && nanotime()-at < residentFor
}

// MarkResident records that the whole file is in the page cache now.
func (e *Entry) MarkResident() { e.residentAt.Store(nanotime()) }

// ClaimProbe reports whether the caller should look for the whole file in
// the page cache now: true for one caller per second, so that concurrent
// requests for a large file do not all probe it at once.
func (e *Entry) ClaimProbe() bool {
	now := nanotime()
	last := e.probedAt.Load()
	return (last == 0 || now-last >= residentFor) && e.probedAt.CompareAndSwap(last, now)
}

// MincoreTrusted reports whether mincore(2) can be asked which of the
// file's pages are in the page cache: true when, at open, the process
// owned the file or could write it. For other files mincore reports every
// page resident; ask the page cache with no-wait reads instead.
func (e *Entry) MincoreTrusted() bool { return e.trusted }

// File returns the open file of a regular-file entry, nil otherwise, to
// be read at explicit offsets (pread). It stays open until the reference
// the caller holds is released.
func (e *Entry) File() io.ReaderAt {
	if e.file == nil {
		return nil
	}
	return e.file
}

// FD returns the descriptor of File, or -1.
func (e *Entry) FD() int {
	if e.file == nil {
		return -1
	}
	return e.fd
}

// The marks of Entry.marks.
const (
	markEvict uint32 = 1 << iota
	markIdle
)

// markUsed sets both marks, for a hit: one store, as one flag cost.
func (e *Entry) markUsed() { e.marks.Store(markEvict | markIdle) }

// takeMark clears mark and reports whether it was set.
func (e *Entry) takeMark(mark uint32) bool { return e.marks.And(^mark)&mark != 0 }

// acquire takes a reference unless the entry is already being closed.
func (e *Entry) acquire() bool {
	if e.file == nil {
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

// Hold takes one more reference on an entry the caller holds (from
// Cache.GetCounted), for work that outlives the request: an io_uring read the
// request let go of keeps the descriptor open until it completes.
func (e *Entry) Hold() {
	if e.file != nil {
		e.refs.Add(1)
	}
}

// Release gives back a reference taken by Cache.GetCounted or Hold.
func (e *Entry) Release() {
	if e.file == nil {
		return
	}
	if e.refs.Add(-1) == 0 {
		e.file.Close()
		if e.cache != nil {
			e.cache.counts[OpenFiles].Add(-1)
			if e.otherMount {
				e.cache.otherMountFiles.Add(-1)
			}
			if n := len(e.data); n != 0 {
				e.cache.counts[MemoryBytes].Add(-int64(n))
			}
		}
		// Nobody holds the entry or can acquire it again (acquire fails
		// at 0), but the descriptors' clock may keep the husk until it is
		// compacted: free what the memory budget counted now, with it.
		e.data = nil
	}
}

// ReadAll returns the whole content of a regular-file entry, in a slice
// of the caller's own.
func (e *Entry) ReadAll() ([]byte, error) {
	if e.data != nil {
		return append([]byte(nil), e.data...), nil
	}
	if !e.IsRegular() {
		return nil, fs.ErrInvalid
	}
	if e.file == nil {
		return nil, fs.ErrInvalid
	}
	b := make([]byte, e.size)
	n, err := e.file.ReadAt(b, 0)
	if err == io.EOF && int64(n) == e.size {
		err = nil
	}
	return b[:n], err
}

// IsDir reports whether the entry is a directory.
func (e *Entry) IsDir() bool { return e.fileMode.IsDir() }

// IsRegular reports whether the entry is a regular file.
func (e *Entry) IsRegular() bool { return e.fileMode.IsRegular() }

// newEntry derives an Entry from a path and its FileInfo.
func newEntry(path string, info fs.FileInfo) *Entry {
	e := &Entry{
		path:     path,
		size:     info.Size(),
		fileMode: info.Mode(),
	}
	e.noBlockDev, e.fileID = fileIdentity(info)
	// The header values are made in one buffer and cut from one string:
	// one allocation per miss instead of three.
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
	e.etag, e.lastModified, e.length = values[:etagEnd], values[etagEnd:lmEnd], values[lmEnd:]
	if !e.fileMode.IsDir() {
		e.contentType = mime.TypeByExtension(filepath.Ext(path))
	}
	return e
}

// usefulModTime reports whether a modification time can serve as a
// validator. Tools that make reproducible builds set it to the epoch or
// one second after it; such a time says nothing about the content.
func usefulModTime(t time.Time) bool {
	u := t.Unix()
	return u != 0 && u != 1
}

// appendStrongETag appends the strong entity tag file_server computes for
// a file, so that caches stay valid when a site switches between the two
// handlers.
func appendStrongETag(b []byte, modTime time.Time, size int64) []byte {
	b = append(b, '"')
	b = strconv.AppendInt(b, modTime.UnixNano(), 36)
	b = append(b, '-')
	b = strconv.AppendInt(b, size, 36)
	return append(b, '"')
}
