package qtransport

import (
	"context"

	"github.com/jiarun/jia/comm/internal/qpbind"
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
	return qpbind.OpenLocal(ctx, "qtransport", provider, job, n, func(int) map[string]string { return devOpts },
		func(ctx context.Context, r int, devs []rdmaio.Device, ex Exchange) (*Transport, error) {
			return New(ctx, Config{Rank: r, Size: n, Exchange: ex, Devices: devs, CloseDevices: true, Options: opt})
		})
}

// CloseAll closes the transports of ranks that run in this process (from
// OpenLocal) all at once, as the ranks of a job close theirs: each one's
// Close lingers for what its peers still owe it (the acknowledgement of a
// message taken and answered by nothing, for one), which they send when
// their own Close polls. It returns the errors joined.
func CloseAll(trs []*Transport) error { return qpbind.CloseAll(trs) }
