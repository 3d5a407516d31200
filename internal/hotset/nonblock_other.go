//go:build !unix

package hotset

// oNonblock: no FIFO can stand for the file here.
const oNonblock = 0
