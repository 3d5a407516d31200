//go:build !linux || flashserve_portable

package transmit

import (
	"errors"
	"net"
)

// MaxChunk is unused where sendfile with an explicit offset is not
// available; kept so that configuration is portable.
var MaxChunk int64 = 2 << 20

// newConn leaves the connection as it is: without explicit-offset
// sendfile, flash_serve's bodies are copied.
func newConn(tc *net.TCPConn) net.Conn { return tc }

func (c *Conn) sendfile(*FileSource, int64, *renewer) (int64, error) {
	return 0, errors.New("sendfile is not supported on this OS")
}
