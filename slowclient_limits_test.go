//go:build linux

package flashserve

import (
	"bufio"
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWriteTimeoutStillCutsSlowClients: the renewal of the write-idle
// deadline within a sendfile turn never passes write_timeout. With
// write_idle 2s and write 3s, a client reading a 4 MiB file at 256 KiB/s
// (16 s) keeps making progress but is cut at about 3 s, by each engine as
// by file_server.
func TestWriteTimeoutStillCutsSlowClients(t *testing.T) {
	const size = 4 << 20
	root := t.TempDir()
	data := make([]byte, size)
	rng := rand.New(rand.NewPCG(3, 3))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if err := os.WriteFile(filepath.Join(root, "big.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	// startSlowSites writes its argument after "write_idle ": the hard
	// limit goes on the next line of the same timeouts block.
	servers := startSlowSites(t, root, []string{"2s\n\t\t\twrite 3s"})
	type res struct {
		name string
		g    slowGet
	}
	out := make(chan res)
	sites := servers["2s\n\t\t\twrite 3s"]
	for _, s := range sites {
		go func() { out <- res{s.name, slowClientGet(s.base, "/big.bin", "", 256<<10, 0, nil)} }()
	}
	for range sites {
		r := <-out
		t.Logf("%-20s status %d, %d of %d bytes in %v, err %v", r.name, r.g.status, len(r.g.body), r.g.length, r.g.duration.Round(time.Millisecond), r.g.err)
		if r.g.status != http.StatusOK {
			t.Errorf("%s: status %d", r.name, r.g.status)
		}
		if r.g.err == nil || len(r.g.body) >= size {
			t.Errorf("%s: %d of %d bytes in %v; write_timeout 3s must cut a 16 s body", r.name, len(r.g.body), size, r.g.duration)
		}
		if r.g.duration > 12*time.Second {
			t.Errorf("%s: cut after %v, want about 3 s", r.name, r.g.duration)
		}
	}
}

// TestKeepAliveAfterRenewedTurns: a connection whose first response was
// sent slowly in a renewed sendfile turn serves a second response on the
// same connection at once, and, left idle, is still closed by the idle
// timeout (the write deadline moved within the turn does not outlive it).
func TestKeepAliveAfterRenewedTurns(t *testing.T) {
	skipIfShort(t, "a 10 s transfer in renewed sendfile turns")
	const size = 1 << 20
	root := t.TempDir()
	data := make([]byte, size)
	rng := rand.New(rand.NewPCG(5, 5))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if err := os.WriteFile(filepath.Join(root, "big.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	const setting = "2s\n\t\t\tidle 1s"
	servers := startSlowSites(t, root, []string{setting})
	for _, s := range servers[setting] {
		if s.name != "sendfile" && s.name != "file_server" {
			continue
		}
		d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
			return c.Control(func(fd uintptr) {
				syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
			})
		}}
		host := strings.TrimPrefix(s.base, "http://")
		c, err := d.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(60 * time.Second))
		br := bufio.NewReaderSize(c, 4096)
		for i, rate := range []int{256 << 10, 0} {
			io.WriteString(c, "GET /big.bin HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("%s: request %d: %v", s.name, i, err)
			}
			start := time.Now()
			var body []byte
			buf := make([]byte, 8<<10)
			for {
				if rate > 0 {
					due := int(time.Since(start).Seconds()*float64(rate)) + len(buf)
					if ahead := len(body) + len(buf) - due; ahead > 0 {
						// The delay is the point: a client that reads at rate.
						time.Sleep(time.Duration(ahead) * time.Second / time.Duration(rate))
						continue
					}
				}
				n, err := resp.Body.Read(buf)
				body = append(body, buf[:n]...)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("%s: request %d: %d bytes, %v", s.name, i, len(body), err)
				}
			}
			if !bytes.Equal(body, data) {
				t.Fatalf("%s: request %d: %d bytes differ", s.name, i, len(body))
			}
			t.Logf("%s: request %d: %d bytes in %v", s.name, i, len(body), time.Since(start).Round(time.Millisecond))
		}
		idleStart := time.Now()
		_, err = br.ReadByte()
		idleFor := time.Since(idleStart)
		t.Logf("%s: idle connection ended after %v: %v", s.name, idleFor.Round(time.Millisecond), err)
		if err == nil || idleFor > 10*time.Second {
			t.Errorf("%s: idle connection not closed by the 1 s idle timeout (%v after %v)", s.name, err, idleFor)
		}
		c.Close()
	}
}
