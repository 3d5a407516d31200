//go:build !linux

package prewarm

import (
	"context"
	"errors"
	"io"
	"os"
)

// ErrUnsupported is returned where the OS cannot report residency here.
var ErrUnsupported = errors.New("page-cache residency is only reported on Linux")

// warmFile reads the first n bytes, which leaves them in the page cache.
func warmFile(ctx context.Context, path string, n int64) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var done int64
	for done < n {
		if ctx.Err() != nil {
			return done, ctx.Err()
		}
		m, err := f.ReadAt(buf[:min(int64(len(buf)), n-done)], done)
		done += int64(m)
		if err == io.EOF {
			return done, nil
		}
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

func FileResidency(path string) (Residency, error) { return Residency{Path: path}, ErrUnsupported }

func Evict(string) error { return ErrUnsupported }
