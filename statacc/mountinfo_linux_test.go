//go:build linux && !flashserve_portable

package statacc

import (
	"slices"
	"strings"
	"testing"
)

// TestMountTableDiff: a read of the mount table gives the mount points of
// the lines that appeared or went since the last read, unescaped, each
// once; a line is a mount by its ID, parent, device, root and mount
// point, so that options changing (a remount) are no change, and a mount
// replaced by another with the same ID (the kernel reuses them at once)
// at the same place is one.
func TestMountTableDiff(t *testing.T) {
	m := &mountWatcher{seen: make(map[string]*uint64)}
	read := func(lines ...string) []string {
		m.table = []byte(strings.Join(lines, "\n") + "\n")
		got := m.diff()
		slices.Sort(got)
		return got
	}
	rootfs := "1 0 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw"
	proc := "21 1 0:20 / /proc rw,nosuid - proc proc rw"
	assets := `40 1 0:39 / /srv/my\040site/assets rw - tmpfs tmpfs rw`
	odd := `41 1 8:1 /data /srv/a\011b\134c\012d rw - ext4 /dev/sda1 rw`
	for _, step := range []struct {
		what  string
		lines []string
		want  []string
	}{
		{"the first read", []string{rootfs, proc}, nil},
		{"the same table", []string{rootfs, proc}, nil},
		{"a mount with a space", []string{rootfs, proc, assets}, []string{"/srv/my site/assets"}},
		{"a tab, a backslash and a newline", []string{rootfs, proc, assets, odd}, []string{"/srv/a\tb\\c\nd"}},
		{"a remount (options only)", []string{strings.Replace(rootfs, "rw,relatime", "ro,relatime", 1), proc, assets, odd}, nil},
		{"an unmount", []string{rootfs, proc, odd}, []string{"/srv/my site/assets"}},
		{"the same ID mounted elsewhere", []string{rootfs, proc, `41 1 8:1 /data /mnt rw - ext4 /dev/sda1 rw`}, []string{"/mnt", "/srv/a\tb\\c\nd"}},
		{"the same ID and place, another root", []string{rootfs, proc, `41 1 8:1 /other /mnt rw - ext4 /dev/sda1 rw`}, []string{"/mnt"}},
		{"a mount over /", []string{rootfs, proc, `41 1 8:1 /other /mnt rw - ext4 /dev/sda1 rw`, "50 1 0:50 / / rw - tmpfs none rw"}, []string{"/"}},
		{"lines cut short are skipped", []string{rootfs, proc, `41 1 8:1 /other /mnt rw - ext4 /dev/sda1 rw`, "50 1 0:50 / / rw - tmpfs none rw", "60 1", ""}, nil},
	} {
		if got := read(step.lines...); !slices.Equal(got, step.want) {
			t.Errorf("%s: %q, want %q", step.what, got, step.want)
		}
	}
}
