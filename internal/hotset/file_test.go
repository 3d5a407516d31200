package hotset

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestSetRoundTripAndCorruption(t *testing.T) {
	dir := t.TempDir()
	path := Path(filepath.Join(dir, "state"), "statacc:{Workers:1}")
	if path != Path(filepath.Join(dir, "state"), "statacc:{Workers:1}") || path == Path(filepath.Join(dir, "state"), "statacc:{Workers:2}") {
		t.Fatalf("Path is not one file per cache key: %s", path)
	}
	files := []File{{Path: "/srv/a.bin", Size: 3, Hits: 9}, {Path: "/srv/b.bin", Size: 1, Hits: 1}}
	if err := Save(path, files); err != nil {
		t.Fatal(err)
	}
	s, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Files, files) || s.Saved.IsZero() {
		t.Fatalf("loaded %+v", s)
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Fatalf("%d files in the state dir; a temporary file was left behind", len(ents))
	}
	raw, _ := os.ReadFile(path)
	os.WriteFile(path, raw[:len(raw)/2], 0o644) // a torn write
	if _, err := Load(path); err == nil {
		t.Fatal("a truncated hot set loaded without error")
	}
	if err := Save(path, []File{{Path: "relative", Size: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil {
		t.Fatal("a hot set with a relative path loaded without error")
	}
	if s, err := Load(filepath.Join(dir, "none.json")); err != nil || len(s.Files) != 0 {
		t.Fatalf("a missing hot set: %+v, %v", s, err)
	}
}

// TestSaverSavesOnStopAndDecays: a saver stopped before its first tick
// saves once, and the counts are decayed after the snapshot it saved.
func TestSaverSavesOnStopAndDecays(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hot.json")
	c := NewCounter(nil)
	leave(c, "/srv/a", 4)
	leave(c, "/srv/b", 8)
	var saved [][]File
	s := StartSaver(path, c, 10, 0, time.Hour, func(files []File, err error) {
		if err != nil {
			t.Error(err)
		}
		saved = append(saved, files)
	})
	if s.Path() != path {
		t.Fatalf("Path() = %s", s.Path())
	}
	s.Stop() // the callback ran before Stop returned
	if len(saved) != 1 || len(saved[0]) != 2 || saved[0][0] != (File{Path: "/srv/b", Hits: 8}) || saved[0][1] != (File{Path: "/srv/a", Hits: 4}) {
		t.Fatalf("saved %+v, want one save of [b=8 a=4]", saved)
	}
	got, err := Load(path)
	if err != nil || !slices.Equal(got.Files, saved[0]) {
		t.Fatalf("the file holds %+v, %v; want what was saved", got, err)
	}
	if top := c.Top(10, 0); len(top) != 2 || top[0].Hits != 4 || top[1].Hits != 2 {
		t.Fatalf("after the save: %+v, want the counts halved", top)
	}
}

// TestSaverSavesOnTick: a saver left running saves on its own.
func TestSaverSavesOnTick(t *testing.T) {
	c := NewCounter(nil)
	leave(c, "/srv/a", 1<<20) // enough hits to outlast the decay of many ticks
	saves := make(chan []File, 1)
	s := StartSaver(filepath.Join(t.TempDir(), "hot.json"), c, 10, 0, time.Millisecond, func(files []File, err error) {
		select {
		case saves <- files:
		default:
		}
	})
	defer s.Stop()
	select {
	case f := <-saves:
		if len(f) != 1 || f[0].Path != "/srv/a" {
			t.Fatalf("saved %+v", f)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no save within 30 s of a 1 ms interval")
	}
}

// TestSaverCarriesTheSavedSet: a saver started over a saved set carries
// it on: a process that stops before its clients asked for the saved
// files again saves them with their counts, beside what it counted
// itself; a corrupt file carries nothing.
func TestSaverCarriesTheSavedSet(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hot.json")
	if err := Save(path, []File{{Path: "/srv/a", Size: 10, Hits: 6}, {Path: "/srv/b", Size: 20, Hits: 2}}); err != nil {
		t.Fatal(err)
	}
	c := NewCounter(nil)
	leave(c, "/srv/c", 3)
	leave(c, "/srv/b", 2)
	saveOnce := func(c *Counter) []File {
		var saved []File
		StartSaver(path, c, 10, 0, time.Hour, func(files []File, err error) {
			if err != nil {
				t.Error(err)
			}
			saved = files
		}).Stop()
		return saved
	}
	// The saved counts come back halved (the decay that followed their
	// save); b as this process saw it last (the leave helper's size 0),
	// its counts added up.
	want := []File{{Path: "/srv/a", Size: 10, Hits: 3}, {Path: "/srv/b", Hits: 1 + 2}, {Path: "/srv/c", Hits: 3}}
	if got := saveOnce(c); !slices.Equal(got, want) {
		t.Fatalf("saved %+v, want the saved set carried on beside this process's counts: %+v", got, want)
	}
	// A second restart that counts nothing keeps the set, halved again.
	want = []File{{Path: "/srv/a", Size: 10, Hits: 1}, {Path: "/srv/b", Hits: 1}, {Path: "/srv/c", Hits: 1}}
	if got := saveOnce(NewCounter(nil)); !slices.Equal(got, want) {
		t.Fatalf("a restart that served nothing saved %+v, want %+v", got, want)
	}
	os.WriteFile(path, []byte("{not json"), 0o644)
	c = NewCounter(nil)
	leave(c, "/srv/d", 1)
	if got := saveOnce(c); len(got) != 1 || got[0].Path != "/srv/d" {
		t.Fatalf("over a corrupt file saved %+v, want only /srv/d", got)
	}
}
