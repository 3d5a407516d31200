//go:build !linux

package prewarm

import "time"

// threadCPU is nil here: batches read while requests are served take
// turns without a pause for the CPU they took.
var threadCPU func() time.Duration
