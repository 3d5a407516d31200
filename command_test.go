package flashserve

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// caddyCommand runs `caddy ARGS...` as a child (the test binary acting as
// Caddy, see TestMain), for at most a minute, with a home and data
// directory of its own, and returns what it printed and its exit status.
func caddyCommand(t *testing.T, args ...string) (stdout, stderr string, status int) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "FLASH_SERVE_TEST_CADDY_ARGS="+strings.Join(args, "\x1f"),
		"HOME="+home, "XDG_DATA_HOME="+filepath.Join(home, "data"), "XDG_CONFIG_HOME="+filepath.Join(home, "config"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		status = exit.ExitCode()
	case err != nil:
		t.Fatalf("caddy %s: %v", strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		t.Fatalf("caddy %s: still running after a minute", strings.Join(args, " "))
	}
	return out.String(), errOut.String(), status
}

// TestCommandErrors: each bad invocation of the flash-serve commands
// exits with status 1 before it starts anything, prints nothing on stdout
// and one sentence on stderr, this one.
func TestCommandErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	file := filepath.Join(dir, "file.txt")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Nothing may start listening: the port is held here, so a command
	// that got as far as listening would fail with another message.
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	listen := held.Addr().String()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"flash-serve", "prewarm", missing}, "Error: path " + missing + " does not exist"},
		{[]string{"flash-serve", "prewarm", dir, missing}, "Error: path " + missing + " does not exist"},
		{[]string{"flash-serve", "prewarm", dir, "--budget", "lots"}, `Error: --budget "lots" is not a size (e.g. 512MiB, 2GiB; 0 for no limit)`},
		{[]string{"flash-serve", "prewarm", dir, "--budget", "-1GiB"}, `Error: --budget "-1GiB" is not a size (e.g. 512MiB, 2GiB; 0 for no limit)`},
		{[]string{"flash-serve", "prewarm", dir, "--workers", "0"}, "Error: --workers 0: need 1 to 64"},
		{[]string{"flash-serve", "prewarm", dir, "--workers", "many"}, `Error: --workers "many" is not a whole number`},
		{[]string{"flash-serve", "prewarm"}, "Error: prewarm needs at least one PATH: a directory or a file"},
		{[]string{"flash-serve", "prewarm", dir, "--budegt", "1GiB"}, "Error: unknown flag: --budegt"},
		{[]string{"flash-serve", "residency", missing}, "Error: path " + missing + " does not exist"},
		{[]string{"flash-serve", "residency", dir, "--top", "-1"}, "Error: --top -1: need 0 or more"},
		{[]string{"flash-serve", "residency"}, "Error: residency needs at least one PATH: a directory or a file"},
		{[]string{"flash-serve", "--root", missing, "--listen", listen}, "Error: root " + missing + " does not exist"},
		{[]string{"flash-serve", "--root", file, "--listen", listen}, "Error: root " + file + " is not a directory"},
		{[]string{"flash-serve", "--root", dir, "--listen", listen, "--bogus"}, "Error: unknown flag: --bogus"},
		{[]string{"flash-serve", "--root", dir, "--listen", listen, "--file-limit", "many"}, `Error: --file-limit "many" is not a whole number`},
		{[]string{"flash-serve", "--root", dir, "--listen", listen, "--browse=maybe"}, `Error: --browse "maybe" is not true or false`},
		{[]string{"flash-serve", "--root", dir, "--listen", listen, "--precompressed", "gzip,lzma"},
			"Error: --precompressed: unknown format 'lzma' (no module http.precompressed.lzma)"},
		{[]string{"flash-serve", "--root", dir, "--listen", listen, "-p", "gzip", "-p", "gzip"},
			"Error: --precompressed: format 'gzip' is listed twice"},
		{[]string{"flash-serve", "--root", dir, "--listen", "127.0.0.1:http"}, `Error: --listen "127.0.0.1:http" is not a network address such as :8080 or 127.0.0.1:8080`},
	} {
		stdout, stderr, status := caddyCommand(t, c.args...)
		if status != 1 || stdout != "" || stderr != c.want+"\n" {
			t.Errorf("caddy %s:\n exit %d, stdout %q, stderr %q\n want exit 1, no stdout, stderr %q",
				strings.Join(c.args, " "), status, stdout, stderr, c.want+"\n")
		}
	}
}

// TestFlashServeVersion: `caddy flash-serve --version` prints the
// version of this module as moduleVersion finds it in the binary, and
// Caddy's, and exits 0 without serving.
func TestFlashServeVersion(t *testing.T) {
	stdout, stderr, status := caddyCommand(t, "flash-serve", "--version")
	if status != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", status, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	_, caddyVersion := caddy.Version()
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "flash_serve ") ||
		!strings.HasSuffix(lines[0], " (github.com/flashserve/caddy-flash-serve)") || lines[1] != "Caddy "+caddyVersion {
		t.Fatalf("--version printed %q; want flash_serve's version and module, then %q", stdout, "Caddy "+caddyVersion)
	}
	// A test binary's main module is this one, with no VCS stamp.
	if v := strings.TrimSuffix(strings.TrimPrefix(lines[0], "flash_serve "), " (github.com/flashserve/caddy-flash-serve)"); v == "" || v == "unknown" {
		t.Errorf("--version found no version of this module in the test binary: %q", lines[0])
	}
}

// TestExportTemplate: `caddy flash-serve export-template` prints the
// listing template, as `caddy file-server export-template` does.
func TestExportTemplate(t *testing.T) {
	ours, _, status := caddyCommand(t, "flash-serve", "export-template")
	theirs, _, status2 := caddyCommand(t, "file-server", "export-template")
	if status != 0 || status2 != 0 || ours != theirs || !strings.Contains(ours, "<html") {
		t.Fatalf("export-template: exit %d and %d, %d and %d bytes", status, status2, len(ours), len(theirs))
	}
}

// TestCaddyAdaptRefusesBadValue: `caddy adapt` of a Caddyfile with an
// out-of-range value exits non-zero and says where, at parse time.
func TestCaddyAdaptRefusesBadValue(t *testing.T) {
	file := filepath.Join(t.TempDir(), "Caddyfile")
	if err := os.WriteFile(file, []byte(siteWith("root /srv\n\t\tsendfile_max_chunk 10KiB")), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, status := caddyCommand(t, "adapt", "--config", file, "--adapter", "caddyfile")
	want := "parsing caddyfile tokens for 'flash_serve': sendfile_max_chunk: need 64KiB to 1GiB, got 10KiB, at " + file + ":4"
	if status == 0 || stdout != "" || !strings.Contains(stderr, want) {
		t.Fatalf("caddy adapt: exit %d, stdout %q, stderr %q; want a non-zero exit and %q", status, stdout, stderr, want)
	}
	t.Logf("caddy adapt: exit %d, stderr %s", status, stderr)
}
