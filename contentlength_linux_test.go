//go:build linux && !flashserve_portable

package flashserve

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// rawExchange sends one GET for path on a new connection to addr and
// returns the response's status line and headers as sent (without Date)
// and every byte that follows them on the connection until the server
// closes it or 2 s pass without a byte.
func rawExchange(t *testing.T, addr, path string) (head string, after []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, addr); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var lines []string
	for {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("GET %s: reading the header: %v", path, err)
		}
		if line == "\r\n" {
			break
		}
		if !strings.HasPrefix(line, "Date:") {
			lines = append(lines, line)
		}
	}
	var rest bytes.Buffer
	for {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		var b [64 << 10]byte
		n, err := br.Read(b[:])
		rest.Write(b[:n])
		if err != nil {
			break
		}
	}
	return strings.Join(lines, ""), rest.Bytes()
}

// TestRewrittenContentLengthBoundsTheBody: a deferred header rule that
// rewrites Content-Length below the body's length makes net/http refuse
// file_server's first write (its 512-byte copy is past the declared
// length): the client gets the header and no body byte, and the
// connection is closed. flash_serve answers the same, whatever engine
// sends the body: it never hands net/http's connection more bytes than
// the header declares, which a client reusing the connection (a proxy's
// pool) would read as the next response.
func TestRewrittenContentLengthBoundsTheBody(t *testing.T) {
	root := t.TempDir()
	// After the declared 100 bytes, the body holds what a client would
	// take for a response of its own.
	forged := []byte("HTTP/1.1 200 OK\r\nContent-Length: 6\r\nContent-Type: text/plain\r\n\r\nforged")
	sizes := []int{600, 20 << 10, 300<<10 + 7}
	rng := rand.NewChaCha8([32]byte{11})
	for _, size := range sizes {
		b := make([]byte, size)
		rng.Read(b)
		copy(b[100:], forged)
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("f%d.bin", size)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const rule = `header >Content-Length 100`
	fsPort := freePort(t)
	engines := []string{"auto", "sendfile", "io_uring"}
	ports := map[string]int{}
	sites := siteBlock(fsPort, root, rule, "file_server")
	for _, e := range engines {
		ports[e] = freePort(t)
		sites += siteBlock(ports[e], root, rule, flashServe("transmit "+e))
	}
	loadSites(t, "", sites)
	for _, size := range sizes {
		path := fmt.Sprintf("/f%d.bin", size)
		fsHead, fsAfter := rawExchange(t, fmt.Sprintf("127.0.0.1:%d", fsPort), path)
		if !strings.Contains(fsHead, "Content-Length: 100\r\n") {
			t.Fatalf("file_server %s: the rule did not apply:\n%s", path, fsHead)
		}
		for _, e := range engines {
			for _, cold := range []bool{false, true} {
				if cold {
					evictCold(t, filepath.Join(root, path), int64(size))
				}
				head, after := rawExchange(t, fmt.Sprintf("127.0.0.1:%d", ports[e]), path)
				if head != fsHead || !bytes.Equal(after, fsAfter) {
					t.Errorf("transmit %s, %s, cold %v: header\n%sand %d bytes after it (forged response among them: %v); file_server: header\n%sand %d bytes",
						e, path, cold, head, len(after), bytes.Contains(after, forged), fsHead, len(fsAfter))
				}
			}
		}
	}
}
