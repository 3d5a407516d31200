//go:build !linux || flashserve_portable

package flashserve

import (
	"testing"
)

// bigFileEngine sends a large file on cleartext HTTP/1.1: without the Linux engines it is copied.
const bigFileEngine = "copy"

// prewarmThroughAPI prewarms a file through the admin API; without
// mincore, only the answer can be checked: the file was read whole.
func prewarmThroughAPI(t *testing.T, admin, root, bigPath string, size int) {
	t.Helper()
	checkPrewarmAnswer(t, admin, root, size)
}
