//go:build linux && !flashserve_portable

package transmit

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// memoryBody is a file with its content kept in memory, as statacc keeps
// a small file's.
type memoryBody struct {
	fileBody
	data []byte
}

func (b memoryBody) Data() []byte { return b.data }

// TestMemoryBodyLeavesFromMemoryUnderEveryPolicy: a body kept in memory is
// sent from memory under every policy, with its descriptor open or not:
// one file's bodies never switch between the copy and the file, which a
// write through a shared mapping changes with no event.
func TestMemoryBodyLeavesFromMemoryUnderEveryPolicy(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.css")
	if err := os.WriteFile(p, []byte("body"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := ringSender(t)
	for _, policy := range []string{PolicyAuto, PolicySendfile, PolicyCopy, PolicyIOUring} {
		s.Policy = policy
		r := httptest.NewRequest("GET", "/a.css", nil)
		if got := s.Choose(httptest.NewRecorder(), r, memoryBody{fileBody{f}, []byte("body")}).Engine; got != EngineMemory {
			t.Errorf("transmit %s: a body kept in memory leaves by %v", policy, got)
		}
		if got := s.Choose(httptest.NewRecorder(), r, fileBody{f}).Engine; got == EngineMemory {
			t.Errorf("transmit %s: a body not kept in memory leaves by %v", policy, got)
		}
	}
}
