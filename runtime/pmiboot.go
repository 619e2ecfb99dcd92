package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"

	"github.com/jiarun/jia/runtime/pmi"
)

// pmiBoot is the bootstrap through a PMI-2 process manager (srun
// --mpi=pmi2, Hydra): the same put / fence / get as jiarun's rendezvous.
// Rank 0 draws the job secret and publishes it with its card; only the
// job's own processes can read the process manager's key-value space.
type pmiBoot struct {
	mu sync.Mutex
	c  *pmi.Client
	rw io.ReadWriteCloser
}

const pmiSecretKey = "jia-secret"

func pmiCardKey(rank int) string { return "jia-card-" + strconv.Itoa(rank) }

// dialPMI opens the session on the descriptor or port of the contract.
func dialPMI(c *Contract) (*pmiBoot, error) {
	var rw io.ReadWriteCloser
	if c.PMIFD >= 0 {
		rw = os.NewFile(uintptr(c.PMIFD), "pmi")
	} else {
		conn, err := net.Dial("tcp", c.PMIPort)
		if err != nil {
			return nil, fmt.Errorf("pmi: dial PMI_PORT %s: %w", c.PMIPort, err)
		}
		rw = conn
	}
	cl, err := pmi.Init(rw, c.PMIJob, c.Rank)
	if err != nil {
		rw.Close()
		return nil, err
	}
	c.Rank, c.Size = cl.Rank, cl.Size
	if c.Addr == "" {
		c.Addr = pmiAddr(os.Getenv("SLURM_LAUNCH_NODE_IPADDR"), hostIPv4)
	}
	return &pmiBoot{c: cl, rw: rw}, nil
}

// pmiAddr picks the IP address a rank started by a process manager listens
// on and publishes in its card, so that ranks on other nodes can reach it:
// the address this host uses toward the node that launched the job (srun's
// node, SLURM_LAUNCH_NODE_IPADDR), which is on the network the nodes share;
// when that is unknown or a loopback address, the host's first IPv4 address
// that is not a loopback one (ifaddr); "" when there is none, and the rank
// then listens on every address, which only ranks on this host can use.
//
// Neither the wildcard address (what the listener then reports is "[::]:port",
// which a peer on another node dials as its own host) nor the host's name
// (which the nodes need not resolve, or may resolve to 127.0.1.1) works
// across nodes.
func pmiAddr(launchNode string, ifaddr func() string) string {
	if ip := net.ParseIP(launchNode); ip != nil && !ip.IsLoopback() && !ip.IsUnspecified() {
		if a, err := localAddrToward(net.JoinHostPort(launchNode, "9")); err == nil {
			if ip := net.ParseIP(a); ip != nil && !ip.IsLoopback() {
				return a
			}
		}
	}
	return ifaddr()
}

// hostIPv4 returns the first IPv4 address, not a loopback one, of an
// interface that is up, or "".
func hostIPv4() string {
	ifs, err := net.Interfaces()
	if err != nil {
		return ""
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
				return n.IP.String()
			}
		}
	}
	return ""
}

// exchange publishes this rank's card and returns every rank's card and
// the job secret.
func (b *pmiBoot) exchange(rank, size int, card []byte) ([][]byte, []byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if rank == 0 {
		secret := make([]byte, SecretLen)
		if _, err := rand.Read(secret); err != nil {
			return nil, nil, err
		}
		if err := b.c.Put(pmiSecretKey, hex.EncodeToString(secret)); err != nil {
			return nil, nil, err
		}
	}
	if err := b.c.Put(pmiCardKey(rank), hex.EncodeToString(card)); err != nil {
		return nil, nil, err
	}
	if err := b.c.Fence(); err != nil {
		return nil, nil, err
	}
	v, err := b.c.Get(pmiSecretKey)
	if err != nil {
		return nil, nil, err
	}
	secret, err := hex.DecodeString(v)
	if err != nil || len(secret) != SecretLen {
		return nil, nil, fmt.Errorf("pmi: malformed %s", pmiSecretKey)
	}
	cards := make([][]byte, size)
	for r := range cards {
		v, err := b.c.Get(pmiCardKey(r))
		if err != nil {
			return nil, nil, err
		}
		if cards[r], err = hex.DecodeString(v); err != nil {
			return nil, nil, fmt.Errorf("pmi: card of rank %d: %w", r, err)
		}
	}
	return cards, secret, nil
}

// gather puts value under key(rank), fences and gets every rank's value.
func (b *pmiBoot) gather(key func(int) string, rank, size int, value []byte) ([][]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.c.Put(key(rank), hex.EncodeToString(value)); err != nil {
		return nil, err
	}
	if err := b.c.Fence(); err != nil {
		return nil, err
	}
	out := make([][]byte, size)
	for r := range out {
		v, err := b.c.Get(key(r))
		if err != nil {
			return nil, err
		}
		if out[r], err = hex.DecodeString(v); err != nil {
			return nil, fmt.Errorf("pmi: value of %s: %w", key(r), err)
		}
	}
	return out, nil
}

func (b *pmiBoot) fence(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.c.Fence()
}

func (b *pmiBoot) abort(msg string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.c.Abort(msg)
}

func (b *pmiBoot) finalize() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	err := b.c.Finalize()
	b.rw.Close()
	return err
}
