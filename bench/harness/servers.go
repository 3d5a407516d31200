//go:build linux

package main

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// server is one of the servers under test.
type server struct {
	name string
	// port serves cleartext HTTP/1.1; tlsPort (0 if none) serves HTTPS with
	// HTTP/1.1 and HTTP/2.
	port, tlsPort int
	// only lists the workloads it takes part in, by id, separated by
	// commas; "" means all, but the HTTPS ones (h1, h2) only with a tlsPort.
	only string
	cmd  *exec.Cmd
	pid  int
}

func (s *server) takes(w string) bool {
	if s.only != "" {
		return slices.Contains(strings.Split(s.only, ","), w)
	}
	return !strings.HasPrefix(w, "h") || s.tlsPort != 0
}

func (s *server) url(path string) string { return fmt.Sprintf("http://127.0.0.1:%d%s", s.port, path) }
func (s *server) tlsURL(path string) string {
	return fmt.Sprintf("https://127.0.0.1:%d%s", s.tlsPort, path)
}

const (
	portFlash   = 18081
	portFile    = 18082
	portResp    = 18083
	portNginx   = 18084
	portLighty  = 18085
	portNgxAio  = 18086
	portResp404 = 18087
	portRespHdr = 18088
	portResp8k  = 18089
	portErr404  = 18094
	tlsFlash    = 18443
	tlsFile     = 18444
)

// fileHeaders is the header block of the respond ceilings that stand for a
// file's answer: the header lines file_server and flash_serve send for a
// static file beside Content-Type (a validator, its date, the ranges it
// takes, Vary), so that the ceiling puts the same bytes on the wire.
const fileHeaders = "\theader {\n\t\tContent-Type application/octet-stream\n\t\tAccept-Ranges bytes\n" +
	"\t\tEtag \"\\\"dl3qk5q2s6x7sg\\\"\"\n\t\tLast-Modified \"Mon, 30 Nov 2026 10:00:00 GMT\"\n\t\tVary Accept-Encoding\n\t}\n"

// caddyfile is the config of one Caddy process: the same binary serves
// flash_serve, file_server and respond, each in its own process so that
// threads, RSS and syscalls are counted per server. body is what the
// respond handlers answer (1 KiB, or a file of the many tree's size).
func caddyfile(work, data, handler string, port, tlsPort int, body string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{
	admin off
	persist_config off
	auto_https disable_redirects
	skip_install_trust
	local_certs
	storage file_system %s
	log {
		level ERROR
	}
`, filepath.Join(work, "caddydata-"+handler))
	if handler == "flash_serve" {
		b.WriteString(flashGlobalOptions)
	}
	b.WriteString("}\n")
	site := func(addr string) {
		fmt.Fprintf(&b, "%s {\n\tbind 127.0.0.1\n", addr)
		if strings.HasPrefix(addr, "https") {
			b.WriteString("\ttls internal\n")
		}
		switch handler {
		case "respond":
			fmt.Fprintf(&b, "\theader Content-Type application/octet-stream\n\trespond %q 200\n}\n", body)
			return
		case "respond_headers", "respond_8k":
			// respond with a file's header lines: the ceiling of a file's
			// answer inside Caddy, with the same bytes on the wire. For
			// respond_8k the body is as long as each file of the many tree,
			// and every URI of e and f gets it: no lookup, no read.
			fmt.Fprintf(&b, "%s\trespond %q 200\n}\n", fileHeaders, body)
			return
		case "respond_404":
			// The ceiling of a 404 inside Caddy: the same empty 404 that
			// file_server and flash_serve answer, with no lookup at all.
			b.WriteString("\trespond 404\n}\n")
			return
		case "error_404":
			// The same 404 as an error, as file_server returns it for a
			// missing file: Caddy's error path (the error's ID and trace,
			// the error logger, the request copied for handle_errors) with
			// no lookup, which is file_server's 404 without its stat.
			// flash_serve takes that path too where error routes, logs or
			// wrappers could see the 404, and writes it itself elsewhere
			// (notfound.go).
			b.WriteString("\terror 404\n}\n")
			return
		}
		fmt.Fprintf(&b, "\troot * %s\n\t%s\n}\n", data, handler)
	}
	site(fmt.Sprintf("http://127.0.0.1:%d", port))
	if tlsPort != 0 {
		site(fmt.Sprintf("https://127.0.0.1:%d", tlsPort))
	}
	return b.String()
}

// flashGlobalOptions is what flash_serve's README tells users to add to
// the global options: the listener wrapper that lets bodies leave with
// sendfile.
var flashGlobalOptions = `	servers {
		listener_wrappers {
			flash_serve
		}
	}
`

// nginxConf is nginx's config for the bench: its defaults, with sendfile
// and open_file_cache. With aio, blocking reads go to a pool of 32 threads
// (`aio threads`), nginx's own answer to a tree that is not in the page
// cache; name keeps the two instances' files apart.
func nginxConf(work, data, name string, port int, aio bool) string {
	pool, aioConf := "", ""
	if aio {
		pool = "thread_pool bench threads=32;\n"
		aioConf = "\taio threads=bench;\n\tdirectio off;\n"
	}
	return fmt.Sprintf(`worker_processes 1;
master_process off;
daemon off;
worker_rlimit_nofile 65536;
error_log %[1]s/%[5]s-error.log error;
pid %[1]s/%[5]s.pid;
%[6]sevents { worker_connections 8192; }
http {
	access_log off;
	sendfile on;
%[7]s	tcp_nopush on;
	keepalive_requests 1000000;
	open_file_cache max=%[4]d inactive=60s;
	open_file_cache_valid 60s;
	open_file_cache_errors on;
	client_body_temp_path %[1]s/%[5]s-body;
	proxy_temp_path %[1]s/%[5]s-proxy;
	fastcgi_temp_path %[1]s/%[5]s-fastcgi;
	uwsgi_temp_path %[1]s/%[5]s-uwsgi;
	scgi_temp_path %[1]s/%[5]s-scgi;
	types { application/octet-stream bin; text/html html; }
	server {
		listen 127.0.0.1:%[2]d;
		root %[3]s;
	}
}
`, work, port, data, openFileCacheMax(), name, pool, aioConf)
}

// openFileCacheMax keeps nginx's descriptor cache well below the limit, or
// it fails with EMFILE on a large tree: half of it, at most 200,000.
func openFileCacheMax() int {
	return int(min(200000, max(1000, noFile/2)))
}

func lighttpdConf(work, data string, port int) string {
	return fmt.Sprintf(`server.document-root = %q
server.bind = "127.0.0.1"
server.port = %d
server.max-fds = 16384
server.max-connections = 8192
server.max-keep-alive-requests = 1000000
server.errorlog = %q
mimetype.assign = ( ".bin" => "application/octet-stream", ".html" => "text/html" )
`, data, port, filepath.Join(work, "lighttpd-error.log"))
}

// serverSpec is a server to start: what it is and the command line.
type serverSpec struct {
	s    *server
	args []string
}

// specs lists the servers of the side-by-side run, with their configs
// written under cfg.work, serving cfg.data.
func specs(cfg *config) ([]serverSpec, error) {
	body1k := strings.Repeat("x", 1024)
	bodyMany := strings.Repeat("x", cfg.set.manyFileSize)
	var out []serverSpec
	for _, h := range []struct {
		name, handler string
		port, tls     int
		only          string // comma-separated workload ids
		body          string
	}{
		{"flash_serve", "flash_serve", portFlash, tlsFlash, "", ""},
		{"file_server", "file_server", portFile, tlsFile, "", ""},
		{"respond", "respond", portResp, 0, "a", body1k},
		{"respond_headers", "respond_headers", portRespHdr, 0, "a", body1k},
		{"respond_404", "respond_404", portResp404, 0, "g,g2", ""},
		{"error_404", "error_404", portErr404, 0, "g,g2", ""},
		// The ceiling of e and f: the same URIs, each answered with a
		// body as long as the files and a file's headers.
		{"respond_8k", "respond_8k", portResp8k, 0, "e,f", bodyMany},
	} {
		conf := filepath.Join(cfg.work, h.name+".Caddyfile")
		if err := os.WriteFile(conf, []byte(caddyfile(cfg.work, cfg.data, h.handler, h.port, h.tls, h.body)), 0o644); err != nil {
			return nil, err
		}
		out = append(out, serverSpec{&server{name: h.name, port: h.port, tlsPort: h.tls, only: h.only},
			[]string{cfg.caddy, "run", "--config", conf, "--adapter", "caddyfile"}})
	}
	if cfg.nginx != "" {
		for _, n := range []struct {
			name string
			port int
			aio  bool
			only string
		}{
			{"nginx", portNginx, false, ""},
			// nginx with aio threads is the peer of the workloads that
			// read from the disk or may: its default config blocks its one
			// worker on every page-cache miss.
			{"nginx_aio", portNgxAio, true, "f,i"},
		} {
			conf := filepath.Join(cfg.work, n.name+".conf")
			if err := os.WriteFile(conf, []byte(nginxConf(cfg.work, cfg.data, n.name, n.port, n.aio)), 0o644); err != nil {
				return nil, err
			}
			out = append(out, serverSpec{&server{name: n.name, port: n.port, only: n.only}, []string{cfg.nginx, "-p", cfg.work, "-c", conf}})
		}
	}
	if cfg.lighttpd != "" {
		conf := filepath.Join(cfg.work, "lighttpd.conf")
		if err := os.WriteFile(conf, []byte(lighttpdConf(cfg.work, cfg.data, portLighty)), 0o644); err != nil {
			return nil, err
		}
		out = append(out, serverSpec{&server{name: "lighttpd", port: portLighty}, []string{cfg.lighttpd, "-D", "-f", conf}})
	}
	return out, nil
}

// startServers starts every server pinned to CPU 0 and waits until each
// answers.
func startServers(cfg *config) ([]*server, error) {
	sps, err := specs(cfg)
	if err != nil {
		return nil, err
	}
	return launch(cfg, sps)
}

// launch starts the servers of sps pinned to CPU 0, each in its own
// process group with its log under cfg.work, and waits until each answers.
func launch(cfg *config, sps []serverSpec) ([]*server, error) {
	var servers []*server
	for _, sp := range sps {
		args := append([]string{"-c", "0"}, sp.args...)
		cmd := exec.Command("taskset", args...)
		logf, err := os.Create(filepath.Join(cfg.work, sp.s.name+".log"))
		if err != nil {
			return servers, err
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			return servers, fmt.Errorf("starting %s: %v", sp.s.name, err)
		}
		sp.s.cmd, sp.s.pid = cmd, cmd.Process.Pid // taskset execs, so the pid is the server's
		servers = append(servers, sp.s)
	}
	for _, s := range servers {
		if err := waitReady(s); err != nil {
			return servers, err
		}
	}
	return servers, nil
}

func waitReady(s *server) error {
	deadline := time.Now().Add(60 * time.Second)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // a local test CA on loopback
	}}
	urls := []string{s.url("/1k.bin")}
	if s.tlsPort != 0 {
		urls = append(urls, s.tlsURL("/1k.bin"))
	}
	for _, u := range urls {
		for {
			resp, err := client.Get(u)
			if err == nil {
				resp.Body.Close()
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s did not answer %s: %v", s.name, u, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func stopServers(servers []*server) {
	for _, s := range servers {
		if s.cmd == nil || s.cmd.Process == nil {
			continue
		}
		syscall.Kill(-s.pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			syscall.Kill(-s.pid, syscall.SIGKILL)
			<-done
		}
	}
}

// procStatus reads Threads and VmRSS (KiB) of a process.
func procStatus(pid int) (threads, rssKiB int) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		switch k {
		case "Threads":
			threads, _ = strconv.Atoi(fields[0])
		case "VmRSS":
			rssKiB, _ = strconv.Atoi(fields[0])
		}
	}
	return threads, rssKiB
}

// sampler records the peak threads and RSS of a process while it runs.
type sampler struct {
	stop                chan struct{}
	done                chan struct{}
	peakThreads, peakKB int
}

func sample(pid int) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(25 * time.Millisecond)
		defer t.Stop()
		for {
			th, kb := procStatus(pid)
			s.peakThreads, s.peakKB = max(s.peakThreads, th), max(s.peakKB, kb)
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) finish() (threads, rssKB int) {
	close(s.stop)
	<-s.done
	return s.peakThreads, s.peakKB
}

// portsFree fails on the first port of ports that something listens on.
func portsFree(ports ...int) error {
	for _, port := range ports {
		if !portFree(port) {
			return fmt.Errorf("port %d on 127.0.0.1 is taken; stop what listens there", port)
		}
	}
	return nil
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
