//go:build linux && !flashserve_portable

package flashserve

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flashserve/caddy-flash-serve/prewarm"
)

// TestPrewarmRootSetByInvokedRoute: a named route that `invoke` runs
// before the handler sets the root the requests have; prewarm must warm
// that root at load, not the one the `root` directive set before the
// invoke.
func TestPrewarmRootSetByInvokedRoute(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	base := t.TempDir()
	files := map[string][]string{}
	var all []string
	for _, name := range []string{"outer", "named"} {
		dir := filepath.Join(base, name)
		os.Mkdir(dir, 0o755)
		for i := range 3 {
			p := filepath.Join(dir, fmt.Sprintf("f%d.bin", i))
			if err := os.WriteFile(p, []byte(strings.Repeat(name[:1], 128<<10)), 0o644); err != nil {
				t.Fatal(err)
			}
			files[name] = append(files[name], p)
			all = append(all, p)
		}
	}
	evictAll(t, all)
	loadSites(t, "", fmt.Sprintf(`&(setroot) {
	root * %s
}
`, filepath.Join(base, "named"))+siteBlock(freePort(t), filepath.Join(base, "outer"), "invoke setroot", flashServe("prewarm *")))
	start := time.Now()
	for _, p := range files["named"] {
		eventually(t, time.Until(start.Add(20*time.Second)), func() error {
			r, err := prewarm.FileResidency(p)
			if err != nil {
				t.Fatal(err)
			}
			if r.Percent() < 100 {
				return fmt.Errorf("%s, under the root the requests have, is %.0f%% resident %v after the load", p, r.Percent(), time.Since(start))
			}
			return nil
		})
	}
	t.Logf("the named route's root resident %v after the load", time.Since(start))
	for _, p := range files["outer"] {
		if r, _ := prewarm.FileResidency(p); r.Resident > 0 {
			t.Errorf("%s, under the root the invoke replaces, is %.0f%% resident", p, r.Percent())
		}
	}
}

// TestPrewarmSaysWhatItWaitsForInHandleResponse: a handler in routes the
// route walk does not read (an intercept's handle_response) is never found
// there; once its config runs, prewarm must say at INFO that it waits for
// a request, not poll in silence for the life of the config.
func TestPrewarmSaysWhatItWaitsForInHandleResponse(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	dir := t.TempDir()
	logFile := filepath.Join(t.TempDir(), "caddy.log")
	loadSites(t, fmt.Sprintf("log {\n\t\toutput file %s\n\t\tlevel INFO\n\t}", logFile), siteBlock(freePort(t), dir,
		block("intercept", "@ok status 2xx", block("handle_response @ok", flashServe("prewarm *"))),
		`respond "x" 200`))
	start := time.Now()
	eventually(t, 10*time.Second, func() error {
		if b, _ := os.ReadFile(logFile); !strings.Contains(string(b), "prewarm waits for the first request") {
			return fmt.Errorf("no INFO line about what prewarm waits for 10 s after the load; the log:\n%s", b)
		}
		return nil
	})
	t.Logf("said %v after the load", time.Since(start))
}
