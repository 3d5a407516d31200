package flashserve

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// headlessChromium runs Debian's chromium headless with args, in a
// process group of its own that is killed when it is done (its renderer
// and zygote with it), and returns what it printed. The test is skipped
// only when chromium is not installed.
func headlessChromium(t *testing.T, args ...string) []byte {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Skipf("chromium is not installed (%v): Debian's chromium package, which .ci/run installs, runs this test", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append([]string{"--headless", "--no-sandbox", "--disable-gpu",
		"--no-first-run", "--hide-scrollbars", "--user-data-dir=" + t.TempDir()}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // whatever of the group is left
	}
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.Bytes())
	}
	return stdout.Bytes()
}

// artifactsDir is where a test leaves what a person should look at (the
// status page's screenshots): $FLASHSERVE_ARTIFACTS, which .ci/run sets,
// or the test's temporary directory.
func artifactsDir(t *testing.T) string {
	if dir := os.Getenv("FLASHSERVE_ARTIFACTS"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.TempDir()
}

// TestStatusPageInChromium: the status page renders in headless Chromium,
// reached as docs/metrics.md says (a site proxying it from the admin
// endpoint, which refuses a browser's own navigation), and the DOM the
// browser builds shows the figures of /flash_serve/stats, sparklines
// drawn from samples taken while the sites were visited. Its screenshots,
// at desktop and phone widths, go to the artifacts directory.
func TestStatusPageInChromium(t *testing.T) {
	defer func(d time.Duration) { sampleEvery = d }(sampleEvery)
	sampleEvery = 100 * time.Millisecond
	site1, site2, admin, status, root1, root2 := twoSites(t)
	// Traffic in bursts between samples, so that the sparklines have
	// something to draw.
	smp := currentSampler()
	for burst := range 12 {
		for range burst % 4 {
			visitTwoSites(t, site1, site2)
		}
		n := len(smp.samples())
		waitFor(t, "the next sample", 10*time.Second, func() bool { return len(smp.samples()) > n })
	}

	// The admin endpoint refuses a browser's navigation (no Origin, and
	// Sec-Fetch-Mode set): the reason for the proxy.
	req, _ := http.NewRequest("GET", admin+"/flash_serve/", nil)
	req.Header.Set("Accept", "text/html")
	req.Header.Set("Sec-Fetch-Mode", "navigate")
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusForbidden {
		t.Errorf("the admin endpoint answered a navigation %d; docs/metrics.md says it refuses it", resp.StatusCode)
	}

	page, statsJSON := steadyStats(t, admin, func() string {
		return string(headlessChromium(t, "--dump-dom", status+"/flash_serve/"))
	})
	if !strings.Contains(page, `id="lookups"`) {
		t.Fatalf("chromium's DOM is not the status page:\n%s", page)
	}
	i1, i2 := siteIndex(t, statsJSON, root1), siteIndex(t, statsJSON, root2)
	figs := checkPageAgainstStats(t, page, statsJSON, append(slices.Clip(statusFigures),
		fmt.Sprintf("sites.%d.hits", i1), fmt.Sprintf("sites.%d.misses", i2), fmt.Sprintf("sites.%d.negative_hits", i2))...)
	if f := figs[fmt.Sprintf("sites.%d.hits", i1)]; f.value == "0" || f.value == "" {
		t.Errorf("site one shows %q hits", f.value)
	}
	if n := strings.Count(page, "<polyline"); n < 8 {
		t.Errorf("%d sparklines drawn, want one for each of lookups, the engines, descriptors, negative entries, cold reads, bodies in flight and the sites", n)
	}

	dir := artifactsDir(t)
	for _, shot := range []struct {
		name   string
		width  int
		height int
	}{{"status.png", 1000, 1400}, {"status-phone.png", 390, 1800}} {
		file := filepath.Join(dir, shot.name)
		headlessChromium(t, "--screenshot="+file, fmt.Sprintf("--window-size=%d,%d", shot.width, shot.height), status+"/flash_serve/")
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := png.DecodeConfig(f)
		f.Close()
		if err != nil || cfg.Width != shot.width || cfg.Height != shot.height {
			t.Errorf("%s: %v, %dx%d, want a %dx%d PNG", file, err, cfg.Width, cfg.Height, shot.width, shot.height)
		}
		t.Logf("screenshot: %s", file)
	}
}
