//go:build !linux || flashserve_portable

package prewarm

import (
	"context"
	"errors"
	"os"
)

// ErrUnsupported is returned where the OS cannot report residency here.
var ErrUnsupported = errors.New("page-cache residency is only reported on Linux")

// warmFile reads the first n bytes, which leaves them in the page cache.
// readPrefix closes f.
func warmFile(ctx context.Context, path string, n int64, readAt ReaderAt) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	return readPrefix(ctx, f, n, readAt)
}

func FileResidency(path string) (Residency, error) { return Residency{Path: path}, ErrUnsupported }

func Evict(string) error { return ErrUnsupported }
