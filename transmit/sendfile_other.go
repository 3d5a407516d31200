//go:build !linux || flashserve_portable

package transmit

import (
	"errors"
	"net"
)

// sendfileBuilt: the wrapper leaves connections as they are, so a body
// handed down is copied by net/http; the copy engine copies it instead.
const sendfileBuilt = false

// newConn leaves the connection as it is: bodies are copied.
func newConn(tc *net.TCPConn) net.Conn { return tc }

func (c *conn) sendfile(*fileSource, int64, *renewer) (int64, error) {
	return 0, errors.New("sendfile is not supported on this OS")
}

func (c *conn) writeMore(p []byte) error {
	_, err := c.TCPConn.Write(p)
	return err
}
