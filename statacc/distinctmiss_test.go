package statacc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkDistinctMissing is a 404 storm of distinct paths, each looked
// up once (issue 29's scanners): short names in 100 directories that
// exist, and 3.4 KB paths 380 levels below a directory that does not,
// each beside the failed open(2) that file_server makes for the same path
// (what a miss cost before directories were listed). The cache has its
// default bounds and has seen 1,000 of the storm's paths first.
func BenchmarkDistinctMissing(b *testing.B) {
	root := b.TempDir()
	for k := range 100 {
		if err := os.Mkdir(filepath.Join(root, fmt.Sprintf("dir%d", k)), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	deep := strings.Repeat("abcdefgh/", 380)
	for _, w := range []struct {
		name string
		path func(i int) string
	}{
		{"short", func(i int) string { return fmt.Sprintf("%s/dir%d/r%09d.html", root, i%100, i) }},
		{"deep", func(i int) string { return fmt.Sprintf("%s/nx%09d/abcdefgh/%sf.html", root, i, deep) }},
	} {
		b.Run(w.name+"/open", func(b *testing.B) {
			paths := make([]string, b.N)
			for i := range paths {
				paths[i] = w.path(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := syscall.Open(paths[i], syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err != syscall.ENOENT {
					b.Fatal(err)
				}
			}
		})
		b.Run(w.name+"/cache", func(b *testing.B) {
			c := New(Options{Revalidate: time.Hour})
			// What an open-ended storm costs, not its start: the storm's
			// directories have been missed in (and listed, where they can).
			for i := range 1000 {
				c.Get(context.Background(), w.path(i+1<<30))
			}
			defer c.Close()
			ctx := context.Background()
			paths := make([]string, b.N)
			for i := range paths {
				paths[i] = w.path(i + 1<<29)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := c.Get(ctx, paths[i]); !errors.Is(err, fs.ErrNotExist) {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(c.counts[WatchedDirs].Load()), "nodes")
			b.ReportMetric(float64(c.counts[NegativeEntries].Load()), "negatives")
			b.ReportMetric(float64(c.counts[Misses].Load())/float64(b.N+1000), "misses/op")
		})
	}
}
