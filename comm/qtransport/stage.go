package qtransport

import (
	"fmt"

	"github.com/jiarun/jia/comm/transport"
)

var _ transport.Stager = (*Transport)(nil)

// AllocStage returns n bytes of the shm device's shared memory
// (transport.Stager): once registered, the ranks of this host read it
// with a plain copy, where ordinary memory costs them a process_vm_readv.
// ErrNotSupported without a shm device. The memory lives until Close.
func (t *Transport) AllocStage(n int) ([]byte, error) {
	if t.closed.Load() {
		return nil, t.errf("alloc stage: %w", transport.ErrClosed)
	}
	d := t.stageDev
	if d == nil || !t.oneSided {
		return nil, t.errf("alloc stage: %w", transport.ErrNotSupported)
	}
	b, err := d.pd.Alloc(n)
	if err != nil {
		return nil, t.errf("alloc stage of %d bytes: %w", n, err)
	}
	t.regMu.Lock()
	t.stages = append(t.stages, stage{d, b})
	t.regMu.Unlock()
	return b, nil
}

// StagedTo reports whether rank dst is reached through the device
// AllocStage's memory comes from (transport.Stager).
func (t *Transport) StagedTo(dst int) bool {
	if uint(dst) >= uint(t.size) || dst == t.rank || t.peers[dst] == nil {
		return false
	}
	return t.stageDev != nil && t.peers[dst].d == t.stageDev
}

// stage is memory from AllocStage and the device it came from.
type stage struct {
	d *device
	b []byte
}

// freeStages frees the memory from AllocStage at teardown, after every
// region was deregistered and before the devices are destroyed (regMu
// held).
func (t *Transport) freeStages() []error {
	var errs []error
	for _, s := range t.stages {
		if err := s.d.pd.Free(s.b); err != nil {
			errs = append(errs, fmt.Errorf("free stage: %w", err))
		}
	}
	t.stages = nil
	return errs
}
