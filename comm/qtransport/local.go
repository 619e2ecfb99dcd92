package qtransport

import (
	"context"
	"errors"
	"fmt"
	"github.com/jiarun/jia/comm/internal/qpbind"
	"sync"

	"github.com/jiarun/jia/rdmaio"
)

// LocalExchange returns all-gather functions for n ranks that are
// goroutines of one process: rank r calls the r-th. A key may be used
// again once every rank has returned from its previous use.
func LocalExchange(n int) []Exchange { return qpbind.LocalExchange(n) }

// OpenLocal builds n ranks in this process: it opens one device of the
// named provider per rank (rdmaio.Config{Job: job, Rank: r, LocalSize: n,
// Options: devOpts}) and connects them with LocalExchange. The transports
// own their devices (Close closes them). It serves tests, benchmarks and
// programs that run several ranks as goroutines; the provider must be
// registered (for "shm", import rdmaio/shm).
func OpenLocal(ctx context.Context, provider, job string, n int, devOpts map[string]string, opt Options) ([]*Transport, error) {
	if n < 1 {
		return nil, fmt.Errorf("qtransport: open local: %d ranks", n)
	}
	devs := make([]rdmaio.Device, n)
	if n > 1 {
		for r := range devs {
			d, err := rdmaio.Open(provider, rdmaio.Config{Job: job, Rank: r, LocalSize: n, Options: devOpts})
			if err != nil {
				closeDevices(devs[:r])
				return nil, fmt.Errorf("qtransport: open local: rank %d: %w", r, err)
			}
			devs[r] = d
		}
	}
	ex := LocalExchange(n)
	trs := make([]*Transport, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range trs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := Config{Rank: r, Size: n, Exchange: ex[r], CloseDevices: true, Options: opt}
			if n > 1 {
				cfg.Devices = devs[r : r+1]
			}
			trs[r], errs[r] = New(ctx, cfg)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, t := range trs {
			if t != nil {
				if cerr := t.Close(); cerr != nil {
					err = errors.Join(err, cerr)
				}
			}
		}
		return nil, err
	}
	return trs, nil
}
