package transmit

// setRingOnly sets the policy that reads every byte of an EngineIOUring
// body through the ring, or the default one.
func (s *Sender) setRingOnly(on bool) {
	s.Policy = PolicyAuto
	if on {
		s.Policy = PolicyIOUring
	}
}
