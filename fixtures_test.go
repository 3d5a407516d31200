package flashserve

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// foreignDirEnv names a directory of test files owned by another user. A
// run by a user who may write it (root, in CI's first step) writes each
// test's files there and skips the test; a later run by a user who may not
// (nobody, via setpriv) serves those files, which it neither owns nor may
// write: the case where mincore lies and the server must not ask it.
const foreignDirEnv = "FLASHSERVE_TEST_FOREIGN_DIR"

// testDir returns a directory that write fills with a test's files. By
// default it is a fresh temporary directory. With FLASHSERVE_TEST_FOREIGN_DIR
// set, it is the subdirectory key of that directory: written (files 0644,
// directories 0755) and the test skipped when this user may write there,
// read as it is otherwise, after checking that this process is indeed
// not trusted with the files' residency. write must make the same files
// every time, so that the test knows their content without reading them.
func testDir(t *testing.T, key string, write func(dir string)) string {
	t.Helper()
	return testDirModes(t, key, write, nil)
}

// testDirModes is testDir that gives the paths of modes (relative to the
// directory) those modes instead of 0755 and 0644, where it writes for
// another user.
func testDirModes(t *testing.T, key string, write func(dir string), modes map[string]fs.FileMode) string {
	t.Helper()
	base := os.Getenv(foreignDirEnv)
	if base == "" {
		dir := t.TempDir()
		write(dir)
		return dir
	}
	dir := filepath.Join(base, key)
	if probe, err := os.CreateTemp(base, ".writable-*"); err == nil {
		probe.Close()
		os.Remove(probe.Name())
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		write(dir)
		// This test's directory only: a walk of base would undo the modes
		// an earlier test gave its own files.
		err := os.Chmod(base, 0o755)
		if err == nil {
			err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				switch {
				case err != nil:
					return err
				case d.IsDir():
					return os.Chmod(p, 0o755)
				case d.Type().IsRegular():
					return os.Chmod(p, 0o644)
				}
				return nil
			})
		}
		for name, mode := range modes {
			if err == nil {
				err = os.Chmod(filepath.Join(dir, name), mode)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Skipf("wrote the files of %s to %s, for a run by a user that does not own them", t.Name(), dir)
	}
	var checked bool
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil && p != dir && errors.Is(err, fs.ErrPermission) {
			return fs.SkipDir // a directory testDirModes made unreadable
		}
		if err != nil || !d.Type().IsRegular() || checked {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		info, err := f.Stat()
		if err != nil {
			return err
		}
		if pagecache.Trusted(int(f.Fd()), info) {
			t.Fatalf("%s is owned or writable by this user: a run on it proves nothing about files it does not own", p)
		}
		checked = true
		return nil
	})
	if err != nil || !checked {
		t.Fatalf("%s has no files of %s (%v): run the same tests first as a user that may write %s (root in CI)", dir, t.Name(), err, base)
	}
	return dir
}
