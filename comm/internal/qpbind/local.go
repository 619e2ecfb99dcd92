package qpbind

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jiarun/jia/rdmaio"
)

// CloseDevices closes each distinct device of devs (nil entries skipped)
// and returns what failed.
func CloseDevices(devs []rdmaio.Device) error {
	seen := map[rdmaio.Device]bool{}
	var errs []error
	for _, d := range devs {
		if d != nil && !seen[d] {
			seen[d] = true
			if err := d.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// OpenLocal builds n ranks of a binding in this process: it opens one
// device of the named provider per rank (rdmaio.Config{Job: job, Rank: r,
// LocalSize: n, Options: devOpts(r)}; devOpts may be nil; no device for a
// single rank) and calls build for every rank at once, connected through
// LocalExchange. build gets the rank's devices as a binding's Config
// takes them: its one device, or nil for a single rank; its transport owns
// them. name (the binding's) starts OpenLocal's own errors. On failure
// every transport built is closed.
func OpenLocal[T interface{ Close() error }](ctx context.Context, name, provider, job string, n int,
	devOpts func(rank int) map[string]string,
	build func(ctx context.Context, rank int, devs []rdmaio.Device, ex Exchange) (T, error)) ([]T, error) {
	if n < 1 {
		return nil, fmt.Errorf("%s: open local: %d ranks", name, n)
	}
	devs := make([]rdmaio.Device, n)
	if n > 1 {
		for r := range devs {
			var o map[string]string
			if devOpts != nil {
				o = devOpts(r)
			}
			d, err := rdmaio.Open(provider, rdmaio.Config{Job: job, Rank: r, LocalSize: n, Options: o})
			if err != nil {
				CloseDevices(devs[:r])
				return nil, fmt.Errorf("%s: open local: rank %d: %w", name, r, err)
			}
			devs[r] = d
		}
	}
	ex := LocalExchange(n)
	trs := make([]T, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range trs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var own []rdmaio.Device
			if devs[r] != nil {
				own = []rdmaio.Device{devs[r]}
			}
			trs[r], errs[r] = build(ctx, r, own, ex[r])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for r, t := range trs {
			if errs[r] == nil {
				err = errors.Join(err, t.Close())
			}
		}
		return nil, err
	}
	return trs, nil
}

// CloseAll closes the transports of ranks that run in this process all at
// once, as the ranks of a job close theirs: each Close lingers for what the
// others still owe it (acknowledgements), which they send from their own
// Close. It returns the errors joined, each naming its rank.
func CloseAll[T interface{ Close() error }](trs []T) error {
	errs := make([]error, len(trs))
	var wg sync.WaitGroup
	for i, tr := range trs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := tr.Close(); err != nil {
				errs[i] = fmt.Errorf("rank %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
