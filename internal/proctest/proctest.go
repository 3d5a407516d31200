// Package proctest counts what a process holds (OS threads, open
// descriptors) for the module's tests, which check that what a test
// started is given back. It reads /proc/self, so the counts exist on
// Linux; elsewhere the calling test is skipped, with the reason.
package proctest

import (
	"os"
	"testing"
)

// Threads returns the process's OS threads (the entries of
// /proc/self/task).
func Threads(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Skipf("cannot count threads: %v", err)
	}
	return len(ents)
}

// FDs returns the process's open descriptors (the entries of
// /proc/self/fd, the one ReadDir opens included).
func FDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count descriptors: %v", err)
	}
	return len(ents)
}

// FDTargets lists what each open descriptor points at ("3→/tmp/x"), for
// a failure message.
func FDTargets() []string {
	ents, _ := os.ReadDir("/proc/self/fd")
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		out = append(out, e.Name()+"→"+target)
	}
	return out
}
