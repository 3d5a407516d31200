//go:build linux && !flashserve_portable

package flashserve

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flashserve/caddy-flash-serve/transmit"
)

// TestWrapperBeforeProxyProtocolSendsFiles: Caddy applies listener
// wrappers in the order listed, the first to the raw TCP connection. With
// flash_serve's listed before proxy_protocol, as the README says, a
// request that came with a PROXY header is answered with sendfile: its
// connection is flash_serve's under proxy_protocol's, which passes
// ReadFrom on. Listed after it, flash_serve sees no raw connection and the
// body is copied; the bytes are the file's either way.
func TestWrapperBeforeProxyProtocolSendsFiles(t *testing.T) {
	root := t.TempDir()
	want := make([]byte, 300<<10)
	rand.NewChaCha8([32]byte{9}).Read(want)
	if err := os.WriteFile(filepath.Join(root, "big.bin"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		wrappers string
		sendfile bool
	}{
		{"flash_serve\n\t\t\tproxy_protocol", true},
		{"proxy_protocol\n\t\t\tflash_serve", false},
	} {
		port := freePort(t)
		loadCaddyfile(t, fmt.Sprintf("{\n\tadmin off\n\tpersist_config off\n\tstorage file_system %s\n\tlog {\n\t\tlevel ERROR\n\t}\n"+
			"\tservers {\n\t\tlistener_wrappers {\n\t\t\t%s\n\t\t}\n\t}\n}\n", t.TempDir(), tc.wrappers)+
			siteBlock(port, root, flashServe("transmit sendfile")))
		for round := range 2 {
			sf0, copy0 := counters.bytes[transmit.EngineSendfile].Load(), counters.bytes[transmit.EngineCopy].Load()
			conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			conn.SetDeadline(time.Now().Add(30 * time.Second))
			fmt.Fprintf(conn, "PROXY TCP4 192.0.2.7 127.0.0.1 40000 %d\r\nGET /big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", port)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				conn.Close()
				t.Fatalf("%q, request %d: %v", tc.wrappers, round+1, err)
			}
			got, err := io.ReadAll(resp.Body)
			conn.Close()
			if err != nil || resp.StatusCode != 200 || !bytes.Equal(got, want) {
				t.Fatalf("%q, request %d: status %d, %d bytes (%v); want 200 and the file's %d", tc.wrappers, round+1, resp.StatusCode, len(got), err, len(want))
			}
			engine, counter, before := "copy", &counters.bytes[transmit.EngineCopy], copy0
			if tc.sendfile {
				engine, counter, before = "sendfile", &counters.bytes[transmit.EngineSendfile], sf0
			}
			// Every byte but the first 512, which net/http may copy itself to sniff, is counted under the engine.
			if d := counterReaches(counter, before+int64(len(want))-sniffLen) - before; d < int64(len(want))-sniffLen {
				t.Errorf("%q, request %d: %d bytes counted as %s, want the body's %d", tc.wrappers, round+1, d, engine, len(want))
			}
		}
	}
}
