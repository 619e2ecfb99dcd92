package runtime

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/jiarun/jia/rdmaio"
	_ "github.com/jiarun/jia/rdmaio/shm" // the shm provider, for ranks of one host
	_ "github.com/jiarun/jia/rdmaio/tcp" // the tcp provider, between hosts
	"github.com/jiarun/jia/runtime/config"
)

// Queues are the rdmaio devices a rank opened to reach its peers: at most
// one per provider, and for every rank the device that reaches it.
type Queues struct {
	// Peer[p] is the device that reaches rank p; Peer[Rank] is nil.
	Peer []rdmaio.Device
	// Devices are the devices opened, by provider name.
	Devices map[string]rdmaio.Device

	closeOnce sync.Once
	closeErr  error
}

// Close closes every device of q.
func (q *Queues) Close() error {
	q.closeOnce.Do(func() {
		var errs []error
		for _, name := range slices.Sorted(maps.Keys(q.Devices)) {
			if err := q.Devices[name].Close(); err != nil {
				errs = append(errs, fmt.Errorf("close %s device: %w", name, err))
			}
		}
		q.closeErr = errors.Join(errs...)
	})
	return q.closeErr
}

// Providers returns, for every rank, the provider that reaches it from this
// rank under the configured transport kind ("" for this rank itself):
//
//   - auto: shm for ranks on this host, verbs for others when both ranks
//     have an RDMA device (their cards say so), else tcp;
//   - shm, tcp, verbs: that provider for every peer (shm only when every
//     rank shares this host).
//
// The choice depends only on the cards and the configuration, which every
// rank holds alike, so both ends of a pair choose the same provider.
func (r *Runtime) Providers() ([]string, error) {
	kind := r.cfg.Transport.Kind
	me := r.cardOf(r.Rank())
	out := make([]string, r.Size())
	for p := range out {
		if p == r.Rank() {
			continue
		}
		c := r.cardOf(p)
		same := c.Host == me.Host
		switch kind {
		case config.TransportAuto, "":
			switch {
			case same:
				out[p] = "shm"
			case hasVerbs(me) && hasVerbs(c):
				out[p] = "verbs"
			default:
				out[p] = "tcp"
			}
		case config.TransportSHM:
			if !same {
				return nil, fmt.Errorf("transport shm reaches only ranks of one host: rank %d is on host %q, rank %d on %q (use --transport auto or tcp)",
					p, c.Host, r.Rank(), me.Host)
			}
			out[p] = "shm"
		default:
			out[p] = string(kind)
		}
	}
	return out, nil
}

// OpenQueues opens the devices this rank needs to reach every peer (see
// Providers) and returns them. The caller owns them: close them with
// Queues.Close before Finalize. An error names the provider that is
// missing or failed to open.
func (r *Runtime) OpenQueues() (*Queues, error) {
	names, err := r.Providers()
	if err != nil {
		return nil, err
	}
	me := r.cardOf(r.Rank())
	local := 0
	for p := 0; p < r.Size(); p++ {
		if r.cardOf(p).Host == me.Host {
			local++
		}
	}
	q := &Queues{Peer: make([]rdmaio.Device, r.Size()), Devices: make(map[string]rdmaio.Device)}
	for p, name := range names {
		if name == "" {
			continue
		}
		dev := q.Devices[name]
		if dev == nil {
			if !registered(name) {
				q.Close()
				return nil, fmt.Errorf("rdmaio provider %q (to reach rank %d) is not built into this program; built in: %s",
					name, p, strings.Join(rdmaio.Providers(), ", "))
			}
			cfg := rdmaio.Config{Job: r.Job(), Rank: r.Rank(), Secret: r.contract.Secret, Options: r.providerOptions(name)}
			if name == "shm" {
				cfg.LocalSize = local
			}
			dev, err = rdmaio.Open(name, cfg)
			if err != nil {
				q.Close()
				return nil, fmt.Errorf("open rdmaio provider %s (to reach rank %d): %w", name, p, err)
			}
			q.Devices[name] = dev
		}
		q.Peer[p] = dev
	}
	return q, nil
}

// cardOf returns rank p's card (a card with only Rank set when the cards are
// unknown, as in a singleton).
func (r *Runtime) cardOf(p int) Card {
	if p < len(r.cards) && r.cards[p].Rank == p {
		return r.cards[p]
	}
	for _, c := range r.cards {
		if c.Rank == p {
			return c
		}
	}
	return Card{Rank: p}
}

// hasVerbs reports whether card c says its rank has an RDMA device that the
// verbs provider can open.
func hasVerbs(c Card) bool {
	_, ok := c.Providers["verbs"]
	return ok
}

func registered(name string) bool { return slices.Contains(rdmaio.Providers(), name) }

// providerOptions returns the options of provider name that the job's
// configuration sets (rdmaio.Config.Options), nil when none.
func (r *Runtime) providerOptions(name string) map[string]string {
	if name != "tcp" {
		return nil
	}
	opts := map[string]string{"sndbuf": strconv.FormatInt(int64(r.cfg.Transport.TCPSendBuffer), 10)}
	if r.tcp != nil {
		// Listen where the rank's own port listens: the interface that
		// reaches the other hosts.
		opts["addr"] = r.tcp.Addr().(*net.TCPAddr).IP.String()
	}
	return opts
}
