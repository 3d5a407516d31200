package transmit

// ColdBuffers reports the cold budget in use: the bytes of buffers that
// ring reads hold now (coldBudget's tokens taken, a chunk each), and the
// most they can hold.
func ColdBuffers() (inUse, limit int64) {
	return int64(len(coldBudget)) * coldChunk, int64(cap(coldBudget)) * coldChunk
}
