//go:build linux

package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// dataset describes the generated files.
type dataset struct {
	bigSize      int64 // size of /1g.bin
	dirs, perDir int   // the many-files tree: dirs × perDir files of 8 KiB
	manyFileSize int
}

func (d dataset) manyPath(i int) string {
	return fmt.Sprintf("/many/d%03d/f%05d.bin", i/d.perDir, i)
}

func (d dataset) manyCount() int { return d.dirs * d.perDir }

// makeData writes the data sets under dir.
func makeData(dir string, d dataset) error {
	rng := rand.New(rand.NewPCG(1, 2))
	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte(rng.Uint32())
	}
	write := func(name string, size int64) error {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		defer f.Close()
		for left := size; left > 0; {
			n := min(left, int64(len(block)))
			// Shift the block so that no two MiB of the file are equal.
			off := int(left % int64(len(block)-int(n)+1))
			if _, err := f.Write(block[off : off+int(n)]); err != nil {
				return err
			}
			left -= n
		}
		return nil
	}
	if err := write("1k.bin", 1024); err != nil {
		return err
	}
	if err := write("64k.bin", 64<<10); err != nil {
		return err
	}
	if err := write("1g.bin", d.bigSize); err != nil {
		return err
	}
	for i := 0; i < d.manyCount(); i++ {
		p := filepath.Join(dir, filepath.FromSlash(d.manyPath(i)))
		if i%d.perDir == 0 {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
		}
		off := rng.IntN(len(block) - d.manyFileSize)
		if err := os.WriteFile(p, block[off:off+d.manyFileSize], 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writeURIs writes n random request paths, one a line, for h2load -i and
// the wrk scripts: existing files of the many tree, or missing ones.
func writeURIs(path string, d dataset, n int, missing bool, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 7))
	var b strings.Builder
	for range n {
		i := rng.IntN(d.manyCount())
		if missing {
			fmt.Fprintf(&b, "/many/d%03d/missing-%08x.bin\n", i/d.perDir, rng.Uint32())
		} else {
			b.WriteString(d.manyPath(i) + "\n")
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// evict drops the data set from the page cache. As root it also drops the
// kernel's dentry and inode caches, so that a cold run is cold for
// metadata too; otherwise it uses posix_fadvise(DONTNEED) on every file.
func evict(dir string) (how string, err error) {
	unix.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200); err == nil {
		return "drop_caches", nil
	}
	err = filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	})
	return "fadvise", err
}
