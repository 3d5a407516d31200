//go:build !unix

package flashserve

import "os"

// ownFD is -1 where sendfile is not used: the copy engine reads the file.
func ownFD(*os.File) int { return -1 }
