//go:build linux

// Command stall measures what clients that never read cost a server
// (docs/engines.md, "What a client that does not read holds"; the figures
// in bench/RESULTS.md, "Stalled clients and cold reads"). All on
// 127.0.0.1, against a server it does not start:
//
//	stall -mode stall -auto 127.0.0.1:9001 -ring 127.0.0.1:9002 -root DIR -rounds 50
//
// opens 300 HTTP/2 streams at a zero window (SETTINGS_INITIAL_WINDOW_SIZE
// 0, no WINDOW_UPDATE, two h2c connections) on -auto, each asking its own
// range of DIR/stall.bin (16 or 80 KiB, 160 KiB apart: 300 × 160 KiB),
// and 300 HTTP/1.1 clients with a 4 KiB receive buffer that never read
// /ring.bin on -ring; then it evicts DIR/probe16k.bin and DIR/probe8m.bin
// before each of -rounds GETs of each over HTTP/1.1 and h2c on -auto and
// prints p50, p99 and the failures (10 s timeout). -mode probe does the
// probes alone.
//
//	stall -mode encode -auto 127.0.0.1:9003 -pid PID -n 800 -path /probe8m.bin
//
// opens -n HTTP/1.1 clients with Accept-Encoding: gzip that never read
// -path and prints the RSS of process PID before and after.
//
//	stall -mode evict -root DIR
//
// evicts every file under DIR from the page cache (POSIX_FADV_DONTNEED).
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"golang.org/x/sys/unix"
)

func evict(path string) {
	f, err := os.Open(path)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

type zw struct {
	c       net.Conn
	fr      *http2.Framer
	host    string
	next    uint32
	headers int
	buf     bytes.Buffer
	enc     *hpack.Encoder
}

func dialZW(addr string) *zw {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		panic(err)
	}
	z := &zw{c: c, fr: http2.NewFramer(c, c), host: addr, next: 1}
	z.enc = hpack.NewEncoder(&z.buf)
	io.WriteString(c, http2.ClientPreface)
	z.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	for {
		f, err := z.fr.ReadFrame()
		if err != nil {
			panic(err)
		}
		if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
			z.fr.WriteSettingsAck()
			break
		}
	}
	go func() {
		for {
			if _, err := z.fr.ReadFrame(); err != nil {
				return
			}
		}
	}()
	return z
}

func (z *zw) get(path string, extra ...string) {
	z.buf.Reset()
	fields := append([]string{":method", "GET", ":scheme", "http", ":authority", z.host, ":path", path}, extra...)
	for i := 0; i+1 < len(fields); i += 2 {
		z.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	z.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: z.next, BlockFragment: z.buf.Bytes(), EndStream: true, EndHeaders: true})
	z.next += 2
}

func nonReader(addr, req string) (net.Conn, chan error) {
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		panic(err)
	}
	io.WriteString(c, req)
	ch := make(chan error, 1)
	go func() {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err := io.ReadFull(c, make([]byte, 1))
		ch <- err
	}()
	return c, ch
}

func rss(pid int) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb
		}
	}
	return -1
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return -1
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p * float64(len(s)-1))
	return s[i]
}

func main() {
	mode := flag.String("mode", "stall", "stall or encode")
	auto := flag.String("auto", "", "host:port: h2 stallers and probes")
	ring := flag.String("ring", "", "host:port: h1 non-readers of /ring.bin")
	root := flag.String("root", "", "the served directory")
	rounds := flag.Int("rounds", 20, "probes of each kind")
	pid := flag.Int("pid", 0, "server pid (encode)")
	n := flag.Int("n", 800, "non-readers (encode)")
	path := flag.String("path", "/probe8m.bin", "what the non-readers ask (encode)")
	flag.Parse()
	switch *mode {
	case "evict":
		n := 0
		filepath.WalkDir(*root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				evict(p)
				n++
			}
			return nil
		})
		fmt.Printf("evicted %d files\n", n)
	case "stall", "probe":
		var zs []*zw
		for i := range 300 {
			if *mode == "probe" {
				break
			}
			if i%150 == 0 {
				zs = append(zs, dialZW(*auto))
			}
			l := 16 << 10
			if i%2 == 1 {
				l = 80 << 10
			}
			zs[len(zs)-1].get("/stall.bin", "range", fmt.Sprintf("bytes=%d-%d", i*(160<<10), i*(160<<10)+l-1))
		}
		var chs []chan error
		for range 300 {
			if *mode == "probe" {
				break
			}
			_, ch := nonReader(*ring, "GET /ring.bin HTTP/1.1\r\nHost: "+*ring+"\r\n\r\n")
			chs = append(chs, ch)
		}
		started := 0
		deadline := time.After(15 * time.Second)
	wait:
		for _, ch := range chs {
			select {
			case err := <-ch:
				if err == nil {
					started++
				}
			case <-deadline:
				break wait
			}
		}
		time.Sleep(time.Second)
		fmt.Printf("h1 non-readers started: %d of 300\n", started)
		var p1, p2 http.Protocols
		p1.SetHTTP1(true)
		p2.SetUnencryptedHTTP2(true)
		h1 := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Protocols: &p1, DisableKeepAlives: true}}
		h2 := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Protocols: &p2}}
		for _, name := range []string{"/probe16k.bin", "/probe8m.bin"} {
			for _, c := range []struct {
				p string
				c *http.Client
			}{{"h1", h1}, {"h2", h2}} {
				var ds []time.Duration
				fails := 0
				for range *rounds {
					evict(filepath.Join(*root, name))
					start := time.Now()
					resp, err := c.c.Get("http://" + *auto + name)
					if err == nil {
						_, err = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					d := time.Since(start)
					if err != nil {
						fails++
						d = 10 * time.Second
					}
					ds = append(ds, d)
				}
				fmt.Printf("%s %s: p50 %v p99 %v max %v failures %d of %d\n", name, c.p, pct(ds, .5).Round(10*time.Microsecond), pct(ds, .99).Round(10*time.Microsecond), pct(ds, 1).Round(10*time.Microsecond), fails, *rounds)
			}
		}
	case "encode":
		before := rss(*pid)
		var chs []chan error
		for range *n {
			_, ch := nonReader(*auto, "GET "+*path+" HTTP/1.1\r\nHost: "+*auto+"\r\nAccept-Encoding: gzip\r\n\r\n")
			chs = append(chs, ch)
		}
		started := 0
		for _, ch := range chs {
			if <-ch == nil {
				started++
			}
		}
		time.Sleep(2 * time.Second)
		after := rss(*pid)
		fmt.Printf("%d of %d non-readers started; RSS %d MB -> %d MB (+%d MB)\n", started, *n, before>>10, after>>10, (after-before)>>10)
	}
}
