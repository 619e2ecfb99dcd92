package qtransport

// AllocShared returns n bytes of the shared memory of t's first device
// (PD.Alloc) and the function that frees them, for the benchmarks that
// compare READs from shared memory with READs from ordinary Go memory.
func (t *Transport) AllocShared(n int) ([]byte, func() error, error) {
	pd := t.devs[0].pd
	b, err := pd.Alloc(n)
	if err != nil {
		return nil, nil, err
	}
	return b, func() error { return pd.Free(b) }, nil
}

// RecvSlab returns the receive buffers of t's first device and the size of
// one buffer.
func (t *Transport) RecvSlab() ([]byte, int) { return t.devs[0].slab, t.devs[0].bufSize }

// Mincore is mincore(2) for the tests: vec[i]&1 tells whether page i of b
// (page-aligned) is resident.
func Mincore(b, vec []byte) error { return mincore(b, vec) }

// HeldPeers is how many peers hold messages of SendShortHeld not posted
// yet.
func (t *Transport) HeldPeers() int { return int(t.heldN.Load()) }
