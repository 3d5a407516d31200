package flashserve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAdminPrewarmRefusesARootItCannotWalk: a prewarm of a root that does
// not exist, or is a file, is a 400 that says so in one sentence, not a
// 200 (or 202) with 0 files.
func TestAdminPrewarmRefusesARootItCannotWalk(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a.txt")
	if err := os.WriteFile(file, []byte("a file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	adminPort := freePort(t)
	admin := fmt.Sprintf("http://127.0.0.1:%d", adminPort)
	loadSites(t, fmt.Sprintf("admin 127.0.0.1:%d", adminPort), siteBlock(freePort(t), dir, "flash_serve"))
	for _, c := range []struct{ root, says string }{
		{filepath.Join(dir, "missing"), "does not exist"},
		{file, "is not a directory"},
	} {
		for _, wait := range []bool{false, true} {
			status, b := adminCall(t, "POST", admin+"/flash_serve/prewarm", fmt.Sprintf(`{"root": %q, "wait": %v}`, c.root, wait))
			var ans struct{ Error string }
			json.Unmarshal(b, &ans)
			if status != 400 || !strings.Contains(ans.Error, c.root+" "+c.says) {
				t.Errorf("prewarm of %s (wait %v): %d %s; want 400 saying it %s", c.root, wait, status, b, c.says)
			}
		}
	}
}

// TestAdminPrewarmOneRunPerRoot: while a warm-up of a root runs, a request
// for the same paths, budget and workers joins it (202 with its plan, or,
// waiting, its figures when it ends), one for other paths is refused with
// 409, and one for another root past the most warm-ups at once with 429
// and Retry-After. Nothing is walked or read for a refused request.
func TestAdminPrewarmOneRunPerRoot(t *testing.T) {
	roots := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	adminPort := freePort(t)
	admin := fmt.Sprintf("http://127.0.0.1:%d", adminPort)
	loadSites(t, fmt.Sprintf("admin 127.0.0.1:%d", adminPort), siteBlock(freePort(t), roots[0], "flash_serve"))
	// Runs that stand for warm-ups in progress, ended by the test.
	budget := int64(defaultPrewarmBudget)
	running := make([]*adminRun, 0, maxAdminPrewarms)
	for i := range maxAdminPrewarms {
		run := &adminRun{root: roots[i], asked: askedFor([]string{"*"}, budget, 0), started: time.Now(),
			planned: map[string]any{"files": 7, "bytes": 700, "budget": budget},
			ready:   make(chan struct{}), done: make(chan struct{}), detached: true}
		close(run.ready)
		adminRuns.Lock()
		adminRuns.byRoot[roots[i]] = run
		adminRuns.Unlock()
		running = append(running, run)
	}
	t.Cleanup(func() {
		adminRuns.Lock()
		for _, run := range running {
			delete(adminRuns.byRoot, run.root)
		}
		adminRuns.Unlock()
	})
	post := func(body string) (int, map[string]any, string) {
		t.Helper()
		status, hdr, b := adminRequest(t, "POST", admin+"/flash_serve/prewarm", body)
		var ans map[string]any
		if err := json.Unmarshal(b, &ans); err != nil {
			t.Fatalf("%s: %d %q is not JSON", body, status, b)
		}
		return status, ans, hdr.Get("Retry-After")
	}

	status, ans, _ := post(fmt.Sprintf(`{"root": %q}`, roots[0]))
	if status != 202 || ans["joined"] != true || ans["files"] != float64(7) {
		t.Errorf("the same warm-up again: %d %v; want 202, joined, with its plan of 7 files", status, ans)
	}
	status, ans, _ = post(fmt.Sprintf(`{"root": %q, "paths": ["sub/*"]}`, roots[0]))
	if msg, _ := ans["error"].(string); status != 409 || !strings.Contains(msg, "a prewarm of "+roots[0]) {
		t.Errorf("other paths of a root being warmed: %d %v; want 409 saying a prewarm of it is running", status, ans)
	}
	status, ans, retry := post(fmt.Sprintf(`{"root": %q}`, roots[2]))
	if msg, _ := ans["error"].(string); status != 429 || retry == "" || !strings.Contains(msg, "the most at once") {
		t.Errorf("a third root with %d warm-ups running: %d %v (Retry-After %q); want 429 with Retry-After", maxAdminPrewarms, status, ans, retry)
	}
	adminRuns.Lock()
	if _, ok := adminRuns.byRoot[roots[2]]; ok {
		t.Error("a refused request left a run behind")
	}
	adminRuns.Unlock()

	// A waiting request joins and gets the run's figures when it ends.
	got := make(chan map[string]any, 1)
	go func() {
		var ans map[string]any
		resp, err := http.Post(admin+"/flash_serve/prewarm", "application/json", strings.NewReader(fmt.Sprintf(`{"root": %q, "wait": true}`, roots[1])))
		if err == nil {
			json.NewDecoder(resp.Body).Decode(&ans)
			resp.Body.Close()
		}
		got <- ans
	}()
	waitFor(t, "the waiting request to join", 10*time.Second, func() bool {
		adminRuns.Lock()
		defer adminRuns.Unlock()
		return running[1].waiters == 1
	})
	running[1].result = map[string]any{"files": 7, "bytes": 700}
	close(running[1].done)
	select {
	case ans := <-got:
		if ans["files"] != float64(7) {
			t.Errorf("a waiting request that joined: %v; want the run's figures", ans)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a waiting request that joined is still waiting 20 s after its run ended")
	}
}

// TestAdminPrewarmWorkersWithinBudget: a run gets the workers asked for,
// at least one, but no more read buffers than its budget fills.
func TestAdminPrewarmWorkersWithinBudget(t *testing.T) {
	for _, c := range []struct {
		asked  int
		budget int64
		want   int
	}{
		{0, defaultPrewarmBudget, 1},
		{8, defaultPrewarmBudget, 8},
		{64, 1, 1},
		{64, 4 << 20, 4},
		{64, 4<<20 + 1, 4},
	} {
		if got := prewarmWorkers(c.asked, c.budget); got != c.want {
			t.Errorf("prewarmWorkers(%d, %d) = %d, want %d", c.asked, c.budget, got, c.want)
		}
	}
}
