//go:build unix

package hotset

import "syscall"

// oNonblock opens a hot-set file without waiting for a writer, should a
// FIFO stand where it should be.
const oNonblock = syscall.O_NONBLOCK
