//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Workload j: restart a server on a cold page cache, then measure the
// first seconds of workload e. Workload k: prewarm throughput on the cold
// tree, against cat. Both manage their own server processes.

const portRestart = 18095

type restartVariant struct {
	// handler is a Caddy handler, or "nginx".
	name, handler string
	// prewarm turns on flash_serve's prewarm; aio nginx's `aio threads`.
	prewarm, aio bool
	// paths is what `prewarm` names besides the saved hot set: "*" (the
	// whole data directory, large files too) when empty. "many" names the
	// tree e reads only, which tells the cost of the paths pass over the
	// rest from the gain of the hot set.
	paths string
}

var restartVariants = []restartVariant{
	{name: "flash_serve+prewarm", handler: "flash_serve", prewarm: true},
	{name: "flash_serve+prewarm_many", handler: "flash_serve", prewarm: true, paths: "many"},
	{name: "flash_serve", handler: "flash_serve"},
	{name: "file_server", handler: "file_server"},
	{name: "nginx", handler: "nginx"},
	{name: "nginx_aio", handler: "nginx", aio: true},
}

func restartCaddyfile(cfg *config, v restartVariant) string {
	var b strings.Builder
	// INFO with prewarm: its "prewarm done" lines say how long the hot set
	// took (warmUpReport); no access log is on either way.
	level := "ERROR"
	if v.prewarm {
		level = "INFO"
	}
	fmt.Fprintf(&b, "{\n\tadmin off\n\tpersist_config off\n\tlog {\n\t\tlevel %s\n\t}\n", level)
	if v.handler == "flash_serve" {
		b.WriteString(flashGlobalOptions)
	}
	fmt.Fprintf(&b, "}\nhttp://127.0.0.1:%d {\n\tbind 127.0.0.1\n\troot * %s\n\t%s", portRestart, cfg.data, v.handler)
	if v.prewarm {
		paths := v.paths
		if paths == "" {
			paths = "*"
		}
		b.WriteString(" {\n\t\tprewarm " + paths + "\n\t\tprewarm_budget 4GiB\n\t\tprewarm_workers 4\n\t}")
	}
	b.WriteString("\n}\n")
	return b.String()
}

// restartOnce evicts the data set, starts the variant, and measures the
// first cfg.restartWindow of workload e.
func restartOnce(cfg *config, v restartVariant, window time.Duration) (measurement, int, int, error) {
	if _, err := evict(cfg.data); err != nil {
		return measurement{}, 0, 0, err
	}
	conf := filepath.Join(cfg.work, "restart-"+strings.ReplaceAll(v.name, "+", "-")+".Caddyfile")
	text, args := restartCaddyfile(cfg, v), []string{cfg.caddy, "run", "--config", conf, "--adapter", "caddyfile"}
	if v.handler == "nginx" {
		conf = filepath.Join(cfg.work, "restart-"+v.name+".conf")
		text, args = nginxConf(cfg.work, cfg.data, "restart-"+v.name, portRestart, v.aio), []string{cfg.nginx, "-p", cfg.work, "-c", conf}
	}
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return measurement{}, 0, 0, err
	}
	cmd := exec.Command("taskset", append([]string{"-c", "0"}, args...)...)
	// Its own data directory: the hot set of one variant is not another's.
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+filepath.Join(cfg.work, "xdg-"+v.name))
	logf, _ := os.Create(conf + ".log")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return measurement{}, 0, 0, err
	}
	s := &server{name: v.name, port: portRestart, cmd: cmd, pid: cmd.Process.Pid}
	defer stopServers([]*server{s})
	if err := waitReady(s); err != nil {
		return measurement{}, 0, 0, err
	}
	saved := cfg.duration
	cfg.duration = window
	defer func() { cfg.duration = saved }()
	smp := sample(s.pid)
	cpu0, cerr := cpuSeconds(s.pid)
	m, err := wrk(cfg, 200, s.url(""), filepath.Join(cfg.work, "many.uris"), int64(cfg.set.manyFileSize))
	windowEnd := time.Now()
	// The server's CPU in the window, warm-ups included, per GiB served:
	// less sensitive to a loaded machine than req/s, and what a warm-up
	// that does not yield adds shows there.
	if cpu1, cerr1 := cpuSeconds(s.pid); err == nil && cerr == nil && cerr1 == nil {
		m.cpuSecs = cpu1 - cpu0
		m.bytes = m.value * window.Seconds() * float64(cfg.set.manyFileSize)
	}
	th, kb := smp.finish()
	if v.prewarm {
		// Stopped first: a pass the stop cuts short logs what it read by
		// then, so that the report says what the paths pass took of the
		// window too.
		stopServers([]*server{s})
		logf.Sync()
		log.Printf("j  %-20s warm-ups: %s", v.name, warmUpReport(conf+".log", windowEnd))
	}
	return m, th, kb, err
}

// warmUpReport sums up the "prewarm done" lines of a server's log: each
// pass's files, bytes, seconds and files per second, so that j says
// whether the hot set was warm before the window ended, and how much the
// passes after it read in the window. A pass whose line was logged after
// windowEnd is marked "stopped": the stop after the window cut it short.
func warmUpReport(logPath string, windowEnd time.Time) string {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, line := range strings.Split(string(b), "\n") {
		var e struct {
			Msg   string  `json:"msg"`
			Pass  string  `json:"pass"`
			Files int64   `json:"files"`
			Bytes int64   `json:"bytes"`
			Took  float64 `json:"took"`
			TS    float64 `json:"ts"`
		}
		if json.Unmarshal([]byte(line), &e) != nil || e.Msg != "prewarm done" {
			continue
		}
		part := fmt.Sprintf("%s %d files, %.0f MB in %.2f s (%.0f files/s)", e.Pass, e.Files, float64(e.Bytes)/1e6, e.Took, float64(e.Files)/max(e.Took, 1e-9))
		if e.TS > float64(windowEnd.UnixNano())/1e9 {
			part += " stopped"
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return "none done in the window"
	}
	return strings.Join(parts, ", ")
}

// measureRestart runs workload j, variants interleaved.
func measureRestart(cfg *config, res map[string]*result) {
	// A variant with prewarm is measured with its saved hot set, as after
	// any restart but the first: one run it is not measured on (its
	// requests are counted into the hot set, saved when it stops) comes
	// first, three windows long, so that it asks for most of the tree (1 -
	// e^-2.4 of e's files at its rate), as a server that ran for a while
	// before its restart has. Without it the first round would warm the
	// whole tree (`prewarm *`) with no set to start from.
	for _, v := range restartVariants {
		if v.prewarm {
			_, _, _, err := restartOnce(cfg, v, 3*cfg.restartWindow)
			log.Printf("j  %-20s seeding its hot set: %v", v.name, errOrOK(err))
		}
	}
	runs := restartRuns(cfg)
	for round := 1; round <= runs; round++ {
		for _, v := range restartVariants {
			if v.handler == "nginx" && cfg.nginx == "" {
				continue
			}
			r := res[v.name]
			if r == nil {
				r = &result{}
				res[v.name] = r
			}
			m, th, kb, err := restartOnce(cfg, v, cfg.restartWindow)
			r.threads, r.rssKB = max(r.threads, th), max(r.rssKB, kb)
			if err != nil {
				r.err = firstLine(err.Error())
				log.Printf("j %s run %d: %v", v.name, round, err)
				continue
			}
			m.round = round
			r.runs = append(r.runs, m)
			log.Printf("j  %-20s run %d: %10.2f req/s, %.1f µs of server CPU per request", v.name, round, m.value,
				1e6*m.cpuSecs/max(1, m.value*cfg.restartWindow.Seconds()))
		}
	}
}

// measurePrewarmThroughput runs workload k: the prewarm command and cat,
// each on the evicted tree of many files.
func measurePrewarmThroughput(cfg *config, res map[string]*result) {
	dir := filepath.Join(cfg.data, "many")
	total := int64(cfg.set.manyCount()) * int64(cfg.set.manyFileSize)
	cmds := []struct {
		name string
		args []string
	}{
		{"flash-serve prewarm", []string{cfg.caddy, "flash-serve", "prewarm", dir, "--budget", "0", "--workers", "4"}},
		{"cat", []string{"sh", "-c", "find " + dir + " -type f -print0 | xargs -0 cat > /dev/null"}},
	}
	runs := restartRuns(cfg)
	for round := 1; round <= runs; round++ {
		for _, c := range cmds {
			r := res[c.name]
			if r == nil {
				r = &result{}
				res[c.name] = r
			}
			if _, err := evict(cfg.data); err != nil {
				r.err = err.Error()
				continue
			}
			start := time.Now()
			out, err := exec.Command("taskset", append([]string{"-c", "0"}, c.args...)...).CombinedOutput()
			secs := time.Since(start).Seconds()
			if err != nil {
				r.err = firstLine(fmt.Sprintf("%v: %s", err, out))
				continue
			}
			m := measurement{value: float64(total) / secs / 1e6, mbps: float64(total) / secs / 1e6,
				filesPS: float64(cfg.set.manyCount()) / secs, round: round}
			r.runs = append(r.runs, m)
			log.Printf("k  %-20s run %d: %8.1f MB/s, %.0f files/s", c.name, round, m.value, m.filesPS)
		}
	}
}

// restartRuns is how often j and k repeat: each run reads the whole tree
// from the disk, so three at most, and one in quick and smoke modes.
func restartRuns(cfg *config) int {
	if cfg.mode != "full" {
		return 1
	}
	return min(cfg.runs, 3)
}

func errOrOK(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}
