//go:build !linux || flashserve_portable

package flashserve

import (
	"encoding/json"
	"fmt"
	"testing"
)

// bigFileEngine sends a large file on cleartext HTTP/1.1: without the Linux engines it is copied.
const bigFileEngine = "copy"

// prewarmThroughAPI prewarms a file through the admin API; without
// mincore, only the answer can be checked: the file was read whole.
func prewarmThroughAPI(t *testing.T, admin, root, bigPath string, size int) {
	t.Helper()
	status, b := adminCall(t, "POST", admin+"/flash_serve/prewarm", fmt.Sprintf(`{"root": %q, "paths": ["big.bin"], "budget": "64MiB", "wait": true}`, root))
	if status != 200 {
		t.Fatalf("prewarm: %d %s", status, b)
	}
	var pw struct{ Files, Bytes int64 }
	json.Unmarshal(b, &pw)
	if pw.Files != 1 || pw.Bytes < int64(size) {
		t.Errorf("prewarm answered %s; want 1 file of %d bytes", b, size)
	}
}
