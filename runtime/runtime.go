package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/runtime/config"
	"github.com/jiarun/jia/runtime/rendezvous"
)

// dialTimeout bounds the connection to the rendezvous server at Init.
const dialTimeout = 30 * time.Second

// Runtime is one rank's view of its job: who it is, the configuration, the
// endpoint cards of every rank and the link to the launcher.
type Runtime struct {
	contract Contract
	cfg      config.Config
	log      *slog.Logger

	rv    *rendezvous.Client // jiarun's rendezvous; nil otherwise
	pmi   *pmiBoot           // a PMI-2 process manager; nil otherwise
	tcp   *net.TCPListener
	udp   *net.UDPConn
	cards []Card
	peers *peerNet

	mu        sync.Mutex
	finalized bool
	epoch     int
}

// Init reads the launch contract from the environment, opens the rank's one
// TCP listening port and one UDP endpoint, publishes its card at the
// rendezvous and waits until every rank has done the same. A program
// started without jiarun becomes a singleton (rank 0 of 1).
func Init(ctx context.Context) (*Runtime, error) {
	c, err := ContractFromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	return InitContract(ctx, c, os.Getenv)
}

// InitContract is Init with an explicit contract and environment lookup.
func InitContract(ctx context.Context, c Contract, getenv func(string) string) (_ *Runtime, err error) {
	var cfg config.Config
	switch {
	case c.Singleton():
		// No launcher resolved the configuration: jia.toml, then JIA_*.
		cfg, _, err = config.Resolve("", false, getenv)
	case c.Config == "":
		// The launcher passes nothing when its configuration is the default.
		cfg = config.Default()
		err = cfg.ApplyEnv(getenv)
	default:
		cfg, err = config.Decode(c.Config)
		if err != nil {
			return nil, fmt.Errorf("rank %d: %s: %w", c.Rank, EnvConfig, err)
		}
		err = cfg.ApplyEnv(getenv)
	}
	if err != nil {
		return nil, fmt.Errorf("rank %d: configuration: %w", c.Rank, err)
	}
	if c.Host == "" {
		c.Host, _ = os.Hostname()
	}
	var boot *pmiBoot
	if c.PMI {
		if boot, err = dialPMI(&c); err != nil {
			return nil, fmt.Errorf("rank %s: %w", rankOrUnknown(c.Rank), err)
		}
	}
	if boot != nil {
		// A process manager does not stop the other ranks when one exits
		// (srun only with --kill-on-bad-exit): ask it to end the job, so
		// that they do not wait for this rank's card forever.
		defer func() {
			if err != nil {
				if aerr := boot.abort(err.Error()); aerr != nil {
					err = errors.Join(err, fmt.Errorf("ask the process manager to end the job: %w", aerr))
				}
			}
		}()
	}
	r := &Runtime{contract: c, cfg: cfg, log: newLogger(cfg, c.Rank), pmi: boot}

	listenHost := "127.0.0.1"
	if c.Addr != "" {
		listenHost = c.Addr
	} else if c.PMI {
		listenHost = "0.0.0.0"
	} else if !c.Singleton() {
		listenHost, err = localAddrToward(c.Rendezvous)
		if err != nil {
			return nil, fmt.Errorf("rank %d: rendezvous %s: %w", c.Rank, c.Rendezvous, err)
		}
	}
	if err := r.openEndpoint(listenHost); err != nil {
		return nil, fmt.Errorf("rank %d: %w", c.Rank, err)
	}
	card := Card{Rank: c.Rank, Host: c.Host, TCP: r.tcp.Addr().String(), UDP: r.udp.LocalAddr().String()}
	if k := cfg.Transport.Kind; (k == config.TransportAuto || k == "") && rdmaio.Usable("verbs") == nil {
		// Tell the peers this rank has an RDMA device: auto mode uses
		// verbs between two ranks only when both have one.
		card.Providers = map[string][]byte{"verbs": nil}
	}
	switch {
	case c.Singleton():
		r.cards = []Card{card}
	case c.PMI:
		if err := r.exchangeCardsPMI(card); err != nil {
			r.closeEndpoint()
			return nil, err
		}
	default:
		if err := r.exchangeCards(ctx, card); err != nil {
			r.closeEndpoint()
			return nil, err
		}
	}
	if r.peers, err = newPeerNet(c.Rank, c.Job, r.contract.Secret, r.tcp, r.cards, r.log); err != nil {
		r.closeEndpoint()
		return nil, fmt.Errorf("rank %d: %w", c.Rank, err)
	}
	r.log.Debug("initialized", "size", c.Size, "tcp", card.TCP, "udp", card.UDP, "transport", cfg.Transport.Kind)
	return r, nil
}

// exchangeCards connects to the rendezvous, puts this rank's card and
// fences, then decodes every rank's card.
func (r *Runtime) exchangeCards(ctx context.Context, card Card) error {
	c := r.contract
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	rv, err := rendezvous.Dial(dctx, c.Rendezvous, c.Job, c.Rank, c.Secret)
	cancel()
	if err != nil {
		return fmt.Errorf("rank %d: %w", c.Rank, err)
	}
	r.rv = rv
	blob, err := card.MarshalBinary()
	if err != nil {
		return fmt.Errorf("rank %d: card: %w", c.Rank, err)
	}
	if err := rv.Put(cardKey(c.Rank), blob); err != nil {
		return fmt.Errorf("rank %d: put card: %w", c.Rank, err)
	}
	kv, err := rv.Fence(ctx)
	if err != nil {
		return fmt.Errorf("rank %d: fence: %w", c.Rank, err)
	}
	r.cards = make([]Card, c.Size)
	for i := range r.cards {
		b, ok := kv[cardKey(i)]
		if !ok {
			return fmt.Errorf("rank %d: rendezvous returned no card for rank %d", c.Rank, i)
		}
		if err := r.cards[i].UnmarshalBinary(b); err != nil {
			return fmt.Errorf("rank %d: card of rank %d: %w", c.Rank, i, err)
		}
		if r.cards[i].Rank != i {
			return fmt.Errorf("rank %d: card under rank %d claims rank %d", c.Rank, i, r.cards[i].Rank)
		}
	}
	go r.watchLauncher()
	return nil
}

func cardKey(rank int) string { return "card/" + strconv.Itoa(rank) }

// exchangeCardsPMI is exchangeCards through a PMI-2 process manager. A
// listening address of 0.0.0.0 or :: is published as the host's name, which the
// process manager's nodes resolve.
func (r *Runtime) exchangeCardsPMI(card Card) error {
	c := &r.contract
	if host, port, err := net.SplitHostPort(card.TCP); err == nil && net.ParseIP(host).IsUnspecified() {
		card.TCP = net.JoinHostPort(c.Host, port)
	}
	if host, port, err := net.SplitHostPort(card.UDP); err == nil && net.ParseIP(host).IsUnspecified() {
		card.UDP = net.JoinHostPort(c.Host, port)
	}
	blob, err := card.MarshalBinary()
	if err != nil {
		return fmt.Errorf("rank %d: card: %w", c.Rank, err)
	}
	blobs, secret, err := r.pmi.exchange(c.Rank, c.Size, blob)
	if err != nil {
		return fmt.Errorf("rank %d: %w", c.Rank, err)
	}
	c.Secret = secret
	r.cards = make([]Card, c.Size)
	for i, b := range blobs {
		if err := r.cards[i].UnmarshalBinary(b); err != nil {
			return fmt.Errorf("rank %d: card of rank %d: %w", c.Rank, i, err)
		}
	}
	return nil
}

func rankOrUnknown(r int) string {
	if r < 0 {
		return "?"
	}
	return strconv.Itoa(r)
}

// watchLauncher ends the rank when the launcher goes away before Finalize:
// a rank must never outlive its job. When the launcher itself ended the
// rendezvous (another rank failed or aborted), it is about to stop this
// rank; the rank waits for that quietly and exits on its own only if it
// does not come.
func (r *Runtime) watchLauncher() {
	<-r.rv.Done()
	err := r.rv.Err()
	if r.isFinalized() || errors.Is(err, rendezvous.ErrClosed) {
		return
	}
	var ab *rendezvous.AbortError
	if errors.Is(err, rendezvous.ErrServerClosed) || errors.As(err, &ab) {
		time.Sleep(launcherStopWait)
		if r.isFinalized() {
			return
		}
	}
	fmt.Fprintf(os.Stderr, "jia: rank %d: lost the connection to jiarun (%v); exiting\n", r.contract.Rank, err)
	os.Exit(1)
}

// launcherStopWait is how long a rank whose job was ended by the launcher
// waits to be stopped by it.
const launcherStopWait = 10 * time.Second

func (r *Runtime) isFinalized() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.finalized
}

// openEndpoint opens the rank's one TCP listening port and one UDP endpoint.
func (r *Runtime) openEndpoint(host string) error {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(host)})
	if err != nil {
		return fmt.Errorf("listen tcp %s: %w", host, err)
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(host)})
	if err != nil {
		ln.Close()
		return fmt.Errorf("listen udp %s: %w", host, err)
	}
	r.tcp, r.udp = ln, udp
	return nil
}

func (r *Runtime) closeEndpoint() {
	if r.peers != nil {
		r.peers.close()
	} else if r.tcp != nil {
		r.tcp.Close()
	}
	if r.udp != nil {
		r.udp.Close()
	}
	if r.rv != nil {
		r.rv.Close()
	}
}

// localAddrToward returns the local IP address this host uses to reach addr,
// so that peers reach this rank over the same network as the launcher.
func localAddrToward(addr string) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	ip := net.ParseIP(host)
	if ip != nil && ip.IsLoopback() {
		return ip.String(), nil
	}
	c, err := net.Dial("udp", addr) // no packet is sent
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

// Rank returns this rank's number.
func (r *Runtime) Rank() int { return r.contract.Rank }

// Size returns the number of ranks in the job.
func (r *Runtime) Size() int { return r.contract.Size }

// LocalRank returns this rank's index among the ranks on its host.
func (r *Runtime) LocalRank() int { return r.contract.LocalRank }

// LocalSize returns the number of ranks on this rank's host.
func (r *Runtime) LocalSize() int { return r.contract.LocalSize }

// Job returns the job identifier.
func (r *Runtime) Job() string { return r.contract.Job }

// Contract returns the launch contract the rank started with.
func (r *Runtime) Contract() Contract { return r.contract }

// Config returns the rank's resolved configuration.
func (r *Runtime) Config() config.Config { return r.cfg }

// Logger returns the rank's structured logger (attribute rank=N).
func (r *Runtime) Logger() *slog.Logger { return r.log }

// Cards returns every rank's endpoint card, indexed by rank.
func (r *Runtime) Cards() []Card { return r.cards }

// Fence waits until every rank has called Fence the same number of times.
// It is the launcher-mediated barrier of the bootstrap, not a fast one.
func (r *Runtime) Fence(ctx context.Context) error {
	if err := r.live("Fence"); err != nil {
		return err
	}
	if r.pmi != nil {
		if err := r.pmi.fence(ctx); err != nil {
			return fmt.Errorf("rank %d: fence: %w", r.contract.Rank, err)
		}
		return nil
	}
	if r.rv == nil {
		return nil
	}
	if _, err := r.rv.Fence(ctx); err != nil {
		return fmt.Errorf("rank %d: fence: %w", r.contract.Rank, err)
	}
	return nil
}

// Exchange is a collective all-gather through the launcher: every rank
// calls it with the same key and its own value, and each gets every rank's
// value, indexed by rank. Packages use it to publish addresses after Init
// (a DSM pager's endpoint, say). It goes through the rendezvous: use it to
// set things up, not in loops.
func (r *Runtime) Exchange(ctx context.Context, key string, value []byte) ([][]byte, error) {
	if err := r.live("Exchange"); err != nil {
		return nil, err
	}
	c := r.contract
	out := make([][]byte, c.Size)
	slot := func(rank int) string { return "x/" + key + "/" + strconv.Itoa(rank) }
	switch {
	case r.pmi != nil:
		vals, err := r.pmi.gather(slot, c.Rank, c.Size, value)
		if err != nil {
			return nil, fmt.Errorf("rank %d: exchange %q: %w", c.Rank, key, err)
		}
		return vals, nil
	case r.rv != nil:
		if err := r.rv.Put(slot(c.Rank), value); err != nil {
			return nil, fmt.Errorf("rank %d: exchange %q: %w", c.Rank, key, err)
		}
		kv, err := r.rv.Fence(ctx)
		if err != nil {
			return nil, fmt.Errorf("rank %d: exchange %q: %w", c.Rank, key, err)
		}
		for i := range out {
			v, ok := kv[slot(i)]
			if !ok {
				return nil, fmt.Errorf("rank %d: exchange %q: rank %d put no value (ranks must call Exchange together, with the same key)", c.Rank, key, i)
			}
			out[i] = v
		}
		return out, nil
	}
	out[0] = append([]byte(nil), value...)
	return out, nil
}

// SendBytes sends b to rank dst over the bootstrap byte path. Frames between
// a pair of ranks arrive in the order they were sent.
func (r *Runtime) SendBytes(dst int, b []byte) error {
	if err := r.live("SendBytes"); err != nil {
		return err
	}
	return r.peers.send(dst, chanBytes, b, nil)
}

// SendFrame sends hdr followed by the pieces of data to rank dst as one
// frame of the message-passing channel, apart from SendBytes traffic.
// Frames to one destination arrive in order, once each, at the frame
// handler of dst.
func (r *Runtime) SendFrame(dst int, hdr []byte, data [][]byte) error {
	return r.peers.send(dst, chanFrames, hdr, data)
}

// SetFrameHandler sets the function that receives every frame sent to this
// rank with SendFrame, with its source; frames that arrived earlier are
// handed to it first. It is called from one goroutine per source and must
// not keep b beyond the call unless it owns it (it does: b is new for every
// frame).
func (r *Runtime) SetFrameHandler(h func(src int, b []byte)) { r.peers.setHandler(h) }

// RecvBytes returns the next frame sent by rank src.
func (r *Runtime) RecvBytes(src int) ([]byte, error) {
	if err := r.live("RecvBytes"); err != nil {
		return nil, err
	}
	return r.peers.recv(src)
}

func (r *Runtime) live(call string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finalized {
		return fmt.Errorf("rank %d: %s called after Finalize", r.contract.Rank, call)
	}
	return nil
}

// ErrFinalized is returned by a second Finalize.
var ErrFinalized = errors.New("already finalized")

// Finalize tells the launcher that this rank finished cleanly and closes
// the rank's endpoint.
func (r *Runtime) Finalize() error {
	r.mu.Lock()
	if r.finalized {
		r.mu.Unlock()
		return fmt.Errorf("rank %d: Finalize: %w", r.contract.Rank, ErrFinalized)
	}
	r.finalized = true
	r.mu.Unlock()
	var err error
	if r.rv != nil {
		if ferr := r.rv.Finalize(); ferr != nil {
			err = fmt.Errorf("rank %d: finalize: %w", r.contract.Rank, ferr)
		}
	}
	if r.pmi != nil {
		if ferr := r.pmi.finalize(); ferr != nil {
			err = fmt.Errorf("rank %d: finalize: %w", r.contract.Rank, ferr)
		}
	}
	r.closeEndpoint()
	return err
}

// Abort asks the launcher to stop the whole job with the given exit code and
// message, then exits this process with that code. It does not return.
func (r *Runtime) Abort(code int, msg string) {
	fmt.Fprintf(os.Stderr, "jia: rank %d: abort (code %d): %s\n", r.contract.Rank, code, msg)
	if r.rv != nil {
		if err := r.rv.Abort(code, msg); err != nil {
			fmt.Fprintf(os.Stderr, "jia: rank %d: abort: %v\n", r.contract.Rank, err)
		}
	}
	if r.pmi != nil {
		if err := r.pmi.abortCode(code, fmt.Sprintf("rank %d: abort (code %d): %s", r.contract.Rank, code, msg)); err != nil {
			fmt.Fprintf(os.Stderr, "jia: rank %d: abort: %v\n", r.contract.Rank, err)
		}
	}
	r.mu.Lock()
	r.finalized = true
	r.mu.Unlock()
	os.Exit(code)
}

// newLogger returns the rank's logger: structured, on stderr, quiet unless
// the configured level asks for more.
func newLogger(cfg config.Config, rank int) *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(cfg.Log.Level)); err != nil {
		lvl = slog.LevelWarn
	}
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler
	if cfg.Log.Format == "json" {
		h = slog.NewJSONHandler(os.Stderr, opts)
	} else {
		h = slog.NewTextHandler(os.Stderr, opts)
	}
	return slog.New(h).With("rank", rank)
}
