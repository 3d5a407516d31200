package prewarm

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
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

// TestHotSetWarmsWhatIsLeft: the saved hot set becomes targets in its
// order with its sizes, and a warm-up of them skips the files that are
// gone or are no regular file any more, without calling that a failure.
func TestHotSetWarmsWhatIsLeft(t *testing.T) {
	dir := t.TempDir()
	a, b, gone, sub := filepath.Join(dir, "a.bin"), filepath.Join(dir, "b.bin"), filepath.Join(dir, "gone.bin"), filepath.Join(dir, "sub")
	os.WriteFile(a, []byte("abc"), 0o644) // grew since the save
	os.WriteFile(b, []byte("b"), 0o644)
	os.Mkdir(sub, 0o755) // a file then, a directory now
	path := filepath.Join(dir, "state", "hotset.json")
	files := []hotset.File{{Path: b, Size: 1, Hits: 9}, {Path: gone, Size: 1, Hits: 5}, {Path: sub, Size: 1, Hits: 3}, {Path: a, Size: 1, Hits: 1}}
	if err := hotset.Save(path, files); err != nil {
		t.Fatal(err)
	}
	ts, err := HotTargets(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []Target{{b, 1}, {gone, 1}, {sub, 1}, {a, 1}}
	if !slices.Equal(ts, want) {
		t.Fatalf("targets %+v, want %+v", ts, want)
	}
	p, err := (&Warmer{Workers: 2}).Run(context.Background(), ts)
	if err != nil {
		t.Fatalf("a warm-up of a hot set with a vanished file failed: %v", err)
	}
	if p.Files != 2 || p.Bytes != 2 {
		t.Fatalf("warmed %d files, %d bytes; want b and a, a byte each", p.Files, p.Bytes)
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
