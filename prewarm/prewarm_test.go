package prewarm

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/flashserve/caddy-flash-serve/statacc"
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

func TestHotSetRoundTripAndCorruption(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "a.bin")
	os.WriteFile(f, []byte("abc"), 0o644)
	path := filepath.Join(dir, "state", "hotset.json")
	files := []statacc.HotFile{{Path: f, Size: 3, Hits: 9}, {Path: filepath.Join(dir, "gone.bin"), Size: 1, Hits: 1}}
	if err := SaveHotSet(path, files); err != nil {
		t.Fatal(err)
	}
	hs, err := LoadHotSet(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs.Files) != 2 || hs.Files[0] != files[0] {
		t.Fatalf("loaded %+v", hs.Files)
	}
	if ts := hs.Targets(); len(ts) != 1 || ts[0].Path != f {
		t.Fatalf("targets %+v: a vanished file must be skipped", ts)
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Fatalf("%d files in the state dir; a temporary file was left behind", len(ents))
	}
	raw, _ := os.ReadFile(path)
	os.WriteFile(path, raw[:len(raw)/2], 0o644) // a torn write
	if _, err := LoadHotSet(path); err == nil {
		t.Fatal("a truncated hot set loaded without error")
	}
	if hs, err := LoadHotSet(filepath.Join(dir, "none.json")); err != nil || len(hs.Files) != 0 {
		t.Fatalf("a missing hot set: %+v, %v", hs, err)
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
