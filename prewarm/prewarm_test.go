package prewarm

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/flashserve/caddy-flash-serve/internal/hotset"
)

func writeSynced(t *testing.T, path string, size int) {
	t.Helper()
	b := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, uint64(size)))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(b)
	// Dirty pages cannot be dropped: write them back first.
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// TestHotTargetsSkipVanishedFiles: the saved hot set becomes targets in
// its order, with today's sizes, and without the files that are gone.
func TestHotTargetsSkipVanishedFiles(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.bin"), filepath.Join(dir, "b.bin")
	os.WriteFile(a, []byte("abc"), 0o644)
	os.WriteFile(b, []byte("b"), 0o644)
	path := filepath.Join(dir, "state", "hotset.json")
	files := []hotset.File{{Path: b, Size: 1, Hits: 9}, {Path: filepath.Join(dir, "gone.bin"), Size: 1, Hits: 5}, {Path: a, Size: 1, Hits: 1}}
	if err := hotset.Save(path, files); err != nil {
		t.Fatal(err)
	}
	ts, err := HotTargets(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 || ts[0] != (Target{Path: b, Size: 1}) || ts[1] != (Target{Path: a, Size: 3}) {
		t.Fatalf("targets %+v, want b (1 byte) then a (3 bytes today), without gone.bin", ts)
	}
	if ts, err := HotTargets(filepath.Join(dir, "none.json")); err != nil || len(ts) != 0 {
		t.Fatalf("a missing hot set: %+v, %v", ts, err)
	}
	os.WriteFile(path, []byte("{"), 0o644)
	if _, err := HotTargets(path); err == nil {
		t.Fatal("a corrupt hot set gave targets without error")
	}
}

func TestExpandStaysUnderRoot(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "v"), 0o755)
	os.WriteFile(filepath.Join(root, "v", "a.mp4"), []byte("a"), 0o644)
	os.WriteFile(filepath.Join(root, "b.txt"), []byte("b"), 0o644)
	got, err := Expand(root, []string{"v/*.mp4", "../../etc/*", "/b.txt"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("expanded %+v", got)
	}
	for _, g := range got {
		if filepath.Dir(g.Path) != root && filepath.Dir(g.Path) != filepath.Join(root, "v") {
			t.Fatalf("%s is outside the root", g.Path)
		}
	}
	all, _ := Expand(root, []string{"*"})
	if len(all) != 2 {
		t.Fatalf("* expanded to %+v", all)
	}
}
