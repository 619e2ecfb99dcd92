package jia

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jiarun/jia/internal/hostcpu"

	"github.com/jiarun/jia/comm"
	"github.com/jiarun/jia/comm/qtransport"
	"github.com/jiarun/jia/comm/rttransport"
	"github.com/jiarun/jia/rdmaio"
	rt "github.com/jiarun/jia/runtime"
	"github.com/jiarun/jia/runtime/config"
)

var (
	worldOnce sync.Once
	world     *comm.Comm
	worldErr  error
)

// World returns the communicator of every rank of the job, MPI's
// MPI_COMM_WORLD: point-to-point calls (comm.Send, comm.Recv, Isend, …)
// and collectives (Barrier, Bcast, Allreduce, …) run on it. Message passing
// starts at the first call; a failure to start it ends the rank, as MPI's
// default error handler does.
func World() *comm.Comm {
	r := get("World")
	worldOnce.Do(func() { world, worldErr = startWorld(r) })
	if worldErr != nil {
		fmt.Fprintf(os.Stderr, "jia: rank %d: message passing: %v\n", r.Rank(), worldErr)
		os.Exit(1)
	}
	return world
}

// startWorld opens the rank's queues and starts message passing on them.
func startWorld(r *rt.Runtime) (*comm.Comm, error) {
	cfg := r.Config()
	hosts := make([]string, r.Size())
	for _, c := range r.Cards() {
		hosts[c.Rank] = c.Host
	}
	// The eager limit is left to the transport, which reports one per
	// peer: that of the provider reaching it (the [comm] overrides per
	// provider, else its default).
	opt := &comm.Options{
		Hosts:       hosts,
		TwoSided:    !cfg.Comm.RendezvousRead,
		PackVectors: cfg.Comm.PackVectors,
	}
	tr, err := openTransport(r, opt)
	if err != nil {
		return nil, err
	}
	w, err := comm.NewWorld(tr, opt)
	if err != nil {
		tr.Close()
		closeQueues()
		return nil, err
	}
	return w, nil
}

var (
	worldTransport comm.Transport
	worldQueues    *rt.Queues
)

// openTransport returns the transport of the world: rdmaio queue pairs to
// every peer, through the provider the runtime chooses for it. When the
// provider a peer needs is not built into the program and the transport
// kind is "auto", every rank falls back alike (the choice depends only on
// the cards) to the runtime's TCP byte path, whose waits must block at once
// (messages arrive through Go's network poller).
func openTransport(r *rt.Runtime, opt *comm.Options) (comm.Transport, error) {
	names, err := r.Providers()
	if err != nil {
		return nil, err
	}
	if r.Config().Transport.Kind == config.TransportAuto {
		for p, name := range names {
			if name != "" && !slices.Contains(rdmaio.Providers(), name) {
				r.Logger().Debug("message passing on the TCP byte path", "reason", "provider "+name+" not built in", "peer", p)
				opt.Spin, opt.Yield = 1, time.Nanosecond
				opt.EagerLimit = int(r.Config().Comm.EagerLimitFor(config.TransportTCP))
				worldTransport = rttransport.New(r)
				return worldTransport, nil
			}
		}
	}
	q, err := r.OpenQueues()
	if err != nil {
		return nil, err
	}
	over := r.LocalSize() > hostcpu.Count()
	if over {
		// Ranks outnumber processors: spinning would only keep the rank
		// being waited for off its processor. After one poll, comm yields
		// the processor to the kernel between polls (no spin, no timer
		// per wait), then blocks in the provider.
		opt.Spin, opt.Yield = 1, 2*time.Millisecond
	}
	if !over && allProvider(names, "shm") {
		// Both ends of a large rendezvous copy, each on its own
		// processor, where one-sided operations are copies by the
		// initiator (shared memory). Oversubscribed, the second copy
		// only waits for a processor; between hosts the wire is shared.
		opt.SplitMin = int(r.Config().Comm.SplitMin)
	}
	tr, err := qtransport.New(context.Background(), qtransport.Config{
		Rank: r.Rank(), Size: r.Size(), Devices: q.Peer, Exchange: r.Exchange,
		// The bounce rings' pages are readied when a ring is allocated,
		// at the first message to its peer that needs one (not Lazy),
		// oversubscribed too: a page faulted in by a message costs tens
		// of microseconds on a virtual machine, in the middle of a wait
		// that other ranks share, while readying the ring is paid once.
		Options: qtransport.Options{EagerLimit: int(r.Config().Comm.EagerLimit),
			EagerLimits: providerEagerLimits(r.Config().Comm)},
	})
	if err != nil {
		q.Close()
		return nil, err
	}
	worldTransport, worldQueues = tr, q
	return tr, nil
}

// allProvider reports whether every peer (names[p] != "") is reached
// through the provider name.
func allProvider(names []string, name string) bool {
	for _, n := range names {
		if n != "" && n != name {
			return false
		}
	}
	return true
}

// providerEagerLimits returns the eager limits of the [comm] section's
// per-provider overrides, by provider name.
func providerEagerLimits(c config.CommConfig) map[string]int {
	m := make(map[string]int)
	for _, k := range []config.TransportKind{config.TransportSHM, config.TransportTCP, config.TransportVerbs} {
		if l := c.EagerLimitFor(k); l > 0 {
			m[string(k)] = int(l)
		}
	}
	return m
}

// closeWorld releases the world's transport and queues (after the final
// fence: no rank needs them any more).
func closeWorld() error {
	var err error
	if worldTransport != nil {
		err = worldTransport.Close()
		worldTransport = nil
	}
	return errors.Join(err, closeQueues())
}

func closeQueues() error {
	if worldQueues == nil {
		return nil
	}
	err := worldQueues.Close()
	worldQueues = nil
	return err
}
