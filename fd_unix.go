//go:build unix

package flashserve

import "os"

// ownFD is the descriptor of a file opened for one request. Fd() is
// called once per such file; it is a plain field read for files that are
// not in the netpoller, as regular files never are.
func ownFD(f *os.File) int { return int(f.Fd()) }
