package statacc

import "io"

// An Entry's open file is a fileRef, held by value in the Entry so that
// an entry with a descriptor costs no allocation beside its own: on Linux
// a bare descriptor (rawfile_linux.go), elsewhere an *os.File
// (handle_os.go). Either is read at explicit offsets, so that any number
// of concurrent responses share it, and closed by the entry's last
// Release. The zero fileRef holds no file.

// entryFile is an Entry seen as its file, the io.ReaderAt that File
// returns: a conversion of the Entry's pointer, which allocates nothing,
// whose errors name the entry's path.
type entryFile Entry

// ReadAt reads len(p) bytes from off, as os.File.ReadAt does: short only
// at the end of the file (io.EOF) or on an error.
func (f *entryFile) ReadAt(p []byte, off int64) (int, error) {
	return f.file.readAt(p, off, f.path)
}

var _ io.ReaderAt = (*entryFile)(nil)
