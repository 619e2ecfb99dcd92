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

// pmiBoot is the bootstrap through a process manager (srun --mpi=pmi2 or
// --mpi=pmix, Hydra, Open MPI's launchers): the same put / fence / get as
// jiarun's rendezvous. Rank 0 draws the job secret and publishes it with its
// card; only the job's own processes can read the process manager's
// key-value space.
type pmiBoot struct {
	mu sync.Mutex
	kv pmKVS
}

// pmKVS is the key-value space of a process manager, as the bootstrap uses
// it: PMI-2 (package pmi) or PMIx (package pmix, in builds with the tag
// pmix).
type pmKVS interface {
	// Put stores value under key for the other processes, visible to them
	// after the next Fence.
	Put(key string, value []byte) error
	// Fence waits for every process of the job.
	Fence() error
	// Get returns the value process src put under key before the last
	// fence.
	Get(src int, key string) ([]byte, error)
	// Abort asks the process manager to end the whole job, reporting
	// status (a process manager may make it the job's exit status) and msg.
	Abort(status int, msg string) error
	// Finalize ends the session and releases what it holds.
	Finalize() error
}

const pmiSecretKey = "jia-secret"

func pmiCardKey(rank int) string { return "jia-card-" + strconv.Itoa(rank) }

// dialPMI opens the session the contract names: PMIx, or PMI-2 on the
// descriptor or port of the contract.
func dialPMI(c *Contract) (*pmiBoot, error) {
	var (
		kv  pmKVS
		err error
	)
	if c.PMIx {
		kv, err = dialPMIx(c)
	} else {
		kv, err = dialPMI2(c)
	}
	if err != nil {
		return nil, err
	}
	if c.Addr == "" {
		c.Addr = pmiAddr(os.Getenv("SLURM_LAUNCH_NODE_IPADDR"), hostIPv4)
	}
	return &pmiBoot{kv: kv}, nil
}

// pmi2KVS is the PMI-2 key-value space. PMI-2 values are text, so values
// travel hex encoded.
type pmi2KVS struct {
	c  *pmi.Client
	rw io.Closer
}

// dialPMI2 opens a PMI-2 session on the descriptor or port of the contract
// and sets the contract's rank and size.
func dialPMI2(c *Contract) (*pmi2KVS, error) {
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
	return &pmi2KVS{c: cl, rw: rw}, nil
}

func (k *pmi2KVS) Put(key string, value []byte) error {
	return k.c.Put(key, hex.EncodeToString(value))
}

func (k *pmi2KVS) Fence() error { return k.c.Fence() }

func (k *pmi2KVS) Get(_ int, key string) ([]byte, error) {
	v, err := k.c.Get(key)
	if err != nil {
		return nil, err
	}
	b, err := hex.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("pmi: value of %s: %w", key, err)
	}
	return b, nil
}

// Abort asks for the end of the job; PMI-2 carries no status.
func (k *pmi2KVS) Abort(_ int, msg string) error { return k.c.Abort(msg) }

func (k *pmi2KVS) Finalize() error {
	err := k.c.Finalize()
	if cerr := k.rw.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("pmi: close: %w", cerr)
	}
	return err
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
			return nil, nil, fmt.Errorf("draw the job secret: %w", err)
		}
		if err := b.kv.Put(pmiSecretKey, secret); err != nil {
			return nil, nil, err
		}
	}
	if err := b.kv.Put(pmiCardKey(rank), card); err != nil {
		return nil, nil, err
	}
	if err := b.kv.Fence(); err != nil {
		return nil, nil, err
	}
	secret, err := b.kv.Get(0, pmiSecretKey)
	if err != nil {
		return nil, nil, err
	}
	if len(secret) != SecretLen {
		return nil, nil, fmt.Errorf("process manager: malformed %s (%d bytes, want %d)", pmiSecretKey, len(secret), SecretLen)
	}
	cards := make([][]byte, size)
	for r := range cards {
		if cards[r], err = b.kv.Get(r, pmiCardKey(r)); err != nil {
			return nil, nil, err
		}
	}
	return cards, secret, nil
}

// gather puts value under key(rank), fences and gets every rank's value.
func (b *pmiBoot) gather(key func(int) string, rank, size int, value []byte) ([][]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.kv.Put(key(rank), value); err != nil {
		return nil, err
	}
	if err := b.kv.Fence(); err != nil {
		return nil, err
	}
	out := make([][]byte, size)
	for r := range out {
		var err error
		if out[r], err = b.kv.Get(r, key(r)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (b *pmiBoot) fence(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.kv.Fence()
}

// abort asks the process manager to end the job after a failure of this
// rank (exit status 1).
func (b *pmiBoot) abort(msg string) error { return b.abortCode(1, msg) }

// abortCode asks the process manager to end the job, reporting code as its
// exit status.
func (b *pmiBoot) abortCode(code int, msg string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.kv.Abort(code, msg)
}

func (b *pmiBoot) finalize() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.kv.Finalize()
}
