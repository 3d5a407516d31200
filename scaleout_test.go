package flashserve

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
)

// TestMain lets the test binary act as Caddy itself (standard modules
// plus this one) when a test starts it as a child process, so that the
// scale-out test runs real, separate nodes without building a binary.
func TestMain(m *testing.M) {
	if args := os.Getenv("FLASH_SERVE_TEST_CADDY_ARGS"); args != "" {
		os.Args = append([]string{"caddy"}, strings.Split(args, "\x1f")...)
		caddycmd.Main()
		return
	}
	os.Exit(m.Run())
}

// caddyProcess is a child Caddy, stopped at the end of the test; log is
// the file that holds what it prints.
type caddyProcess struct {
	cmd  *exec.Cmd
	name string
	log  string
}

// startCaddyProcess starts `caddy run` with a Caddyfile.
func startCaddyProcess(t *testing.T, name, config string, env ...string) *caddyProcess {
	t.Helper()
	return startCaddyCommand(t, name, runArgs(config), env...)
}

// startCaddyCommand starts `caddy ARGS...` (the test binary, see
// TestMain) with a home and data directory of its own, killed at the end
// of the test or after five minutes.
func startCaddyCommand(t *testing.T, name string, args []string, env ...string) *caddyProcess {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return startCaddyProcessAs(t, name, exe, t.TempDir(), nil, args, env...)
}

// runArgs are the arguments of `caddy run` with a Caddyfile.
func runArgs(config string) []string {
	return []string{"run", "--config", config, "--adapter", "caddyfile"}
}

// startCaddyProcessAs is startCaddyCommand with the test binary at exe
// and the home directory home; with process attributes (not nil: a
// credential on Unix), run with them, in home.
func startCaddyProcessAs(t *testing.T, name, exe, home string, attr *syscall.SysProcAttr, args []string, env ...string) *caddyProcess {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	cmd := exec.CommandContext(ctx, exe)
	if attr != nil {
		cmd.Dir = home
		cmd.SysProcAttr = attr
	}
	cmd.Env = append(os.Environ(),
		"FLASH_SERVE_TEST_CADDY_ARGS="+strings.Join(args, "\x1f"),
		"HOME="+home, "XDG_DATA_HOME="+filepath.Join(home, "data"), "XDG_CONFIG_HOME="+filepath.Join(home, "config"))
	cmd.Env = append(cmd.Env, env...)
	logFile, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &caddyProcess{cmd: cmd, name: name, log: logFile.Name()}
	t.Cleanup(func() {
		p.stop()
		cancel()
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("%s log:\n%s", name, b)
		}
	})
	return p
}

// stop kills the process as a crash would, and waits for it.
func (p *caddyProcess) stop() {
	if p.cmd.ProcessState == nil {
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.cmd.Wait()
	}
}

func TestScaleOutShardsByPath(t *testing.T) {
	root := t.TempDir()
	var paths []string
	for i := range 40 {
		name := fmt.Sprintf("/f%02d.txt", i)
		if err := os.WriteFile(filepath.Join(root, name), []byte(name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, name)
	}
	front, n1, n2 := freePort(t), freePort(t), freePort(t)
	nodeCfg, _ := filepath.Abs("testdata/scaleout/node.Caddyfile")
	frontCfg, _ := filepath.Abs("testdata/scaleout/front.Caddyfile")
	startNode := func(name string, port int) *caddyProcess {
		return startCaddyProcess(t, name, nodeCfg, "NODE_NAME="+name, fmt.Sprintf("NODE_PORT=%d", port), "SITE_ROOT="+root)
	}
	node1 := startNode("node1", n1)
	startNode("node2", n2)
	startCaddyProcess(t, "front", frontCfg, fmt.Sprintf("FRONT_PORT=%d", front),
		fmt.Sprintf("NODE1=127.0.0.1:%d", n1), fmt.Sprintf("NODE2=127.0.0.1:%d", n2))

	c := &http.Client{Timeout: 10 * time.Second}
	base := fmt.Sprintf("http://127.0.0.1:%d", front)
	servedBy := func(p string) (string, error) {
		resp, err := c.Get(base + p)
		if err != nil {
			return "", err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return "", fmt.Errorf("GET %s: status %d", p, resp.StatusCode)
		}
		return resp.Header.Get("X-Served-By"), nil
	}
	healthy := func(port int) func() bool {
		return func() bool {
			resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
			if err == nil {
				resp.Body.Close()
			}
			return err == nil && resp.StatusCode == 200
		}
	}
	waitFor(t, "node1", 60*time.Second, healthy(n1))
	waitFor(t, "node2", 60*time.Second, healthy(n2))
	waitFor(t, "the front", 60*time.Second, func() bool { _, err := servedBy(paths[0]); return err == nil })
	// Both nodes must be in the front's healthy set before the mapping is
	// read: wait until some path is served by each.
	waitFor(t, "both nodes in rotation", 20*time.Second, func() bool {
		seen := map[string]bool{}
		for _, p := range paths {
			if n, err := servedBy(p); err == nil {
				seen[n] = true
			}
		}
		return seen["node1"] && seen["node2"]
	})

	home := map[string]string{}
	for round := range 3 {
		for _, p := range paths {
			n, err := servedBy(p)
			if err != nil {
				t.Fatal(err)
			}
			if round == 0 {
				home[p] = n
			} else if home[p] != n {
				t.Fatalf("%s moved from %s to %s with both nodes up", p, home[p], n)
			}
		}
	}
	count := map[string]int{}
	for _, n := range home {
		count[n]++
	}
	t.Logf("shards: %v", count)
	if count["node1"] == 0 || count["node2"] == 0 {
		t.Fatalf("one node holds every path: %v", count)
	}

	// node1 dies: every request still succeeds, on node2.
	node1.stop()
	for round := range 2 {
		for _, p := range paths {
			n, err := servedBy(p)
			if err != nil {
				t.Fatalf("with node1 down (round %d): %v", round, err)
			}
			if n != "node2" {
				t.Fatalf("with node1 down, %s was served by %q", p, n)
			}
		}
	}

	// node1 comes back: its paths come home, and node2 keeps its own.
	startNode("node1", n1)
	waitFor(t, "node1 back", 60*time.Second, healthy(n1))
	waitFor(t, "node1's paths to come home", 30*time.Second, func() bool {
		for _, p := range paths {
			if n, err := servedBy(p); err != nil || n != home[p] {
				return false
			}
		}
		return true
	})
}
