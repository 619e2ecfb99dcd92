package launcher

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// The link is the one byte stream between jiarun (the root) and the proxy
// of a host: over SSH it is the session's standard input and output. It
// carries length-prefixed frames: a uint32 big-endian length of what
// follows, a type byte, and the payload. The rendezvous connections of the
// host's ranks are multiplexed over it as streams, so the root sees one
// connection per host and needs no port reachable from the hosts.

// Frame types on the link.
const (
	// root → proxy
	linkLaunch    byte = 1 // JSON launchSpec
	linkSignal    byte = 2 // uvarint signal number
	linkStdin     byte = 3 // bytes for the stdin rank; empty = EOF
	linkShutdown  byte = 4 // kill every rank now and exit
	linkStage     byte = 5 // JSON stageSpec: make sure the host has this file
	linkStageData byte = 6 // zstd-compressed content; empty = end
	linkPing      byte = 7 // the root is alive (every heartbeat interval)
	linkGo        byte = 8 // every host is ready: start the ranks
	linkAuthReply byte = 9 // uvarint request, JSON authReply

	// proxy → root
	linkStarted   byte = 0x81 // uvarint rank, uvarint pid
	linkOutput    byte = 0x82 // uvarint rank, byte stream (1 stdout, 2 stderr), whole lines
	linkExit      byte = 0x83 // uvarint rank, varint code (-1 if signalled), uvarint signal
	linkFatal     byte = 0x84 // a message: the proxy failed and is exiting
	linkDone      byte = 0x85 // every rank exited and its output was sent
	linkStageNeed byte = 0x86 // send the file
	linkStaged    byte = 0x87 // the file's path on the host
	linkAlive     byte = 0x88 // the proxy is alive (every heartbeat interval)
	linkReady     byte = 0x89 // the proxy and its subtree wait for linkGo; else why not (a message)
	linkLost      byte = 0x8a // JSON lostReport: a host below this proxy was lost
	linkNotice    byte = 0x8b // a line for jiarun's standard error, from a host below
	linkAuthAsk   byte = 0x8c // uvarint request, JSON authRequest (see treeAuth)

	// both ways: rendezvous streams
	linkRVOpen  byte = 0x41 // uvarint stream (proxy → root)
	linkRVData  byte = 0x42 // uvarint stream, bytes
	linkRVClose byte = 0x43 // uvarint stream
)

// maxLinkFrame bounds a frame on the link.
const maxLinkFrame = 64 << 20

// launchSpec is what the root tells a proxy to start.
type launchSpec struct {
	Job       string
	Size      int
	Secret    string // hex
	Config    string
	Program   string
	Args      []string
	Env       []string
	WorkDir   string
	Advertise string // address the host's ranks listen on and publish
	Ranks     []int  // global ranks on this host, in local order
	StdinRank int
	HostName  string
	BindTo    string `json:",omitempty"` // binding of the host's ranks (Job.BindTo)
	// HeartbeatTimeout is how long the proxy waits without a frame from
	// the root before it kills its ranks and exits; also how long it lets
	// a child proxy be silent before it reports that host lost.
	HeartbeatTimeout time.Duration

	// Children are the hosts whose proxies this proxy starts (tree
	// fan-out), each with its own launch.
	Children []childLaunch `json:",omitempty"`
	// Agent is the launch agent this proxy starts its children with; nil
	// for SSH (see childLaunch.SSH).
	Agent []string `json:",omitempty"`
	// NoStage: the children run Jiarun and Program at the same paths;
	// otherwise this proxy stages its own binary (whose hash is
	// JiarunHash) and its program to them.
	NoStage    bool     `json:",omitempty"`
	Jiarun     string   `json:",omitempty"`
	JiarunHash fileHash `json:",omitzero"`
	// KeepaliveInterval and KeepaliveCountMax are those of the SSH
	// connections to the children.
	KeepaliveInterval time.Duration `json:",omitempty"`
	KeepaliveCountMax int           `json:",omitempty"`
}

// childLaunch is a host whose proxy another proxy starts.
type childLaunch struct {
	Host string
	// SSH says how to log in to the host when there is no launch agent.
	SSH    *sshHop `json:",omitempty"`
	Launch launchSpec
}

// sshHop is a host as the login node's ssh configuration resolves it, for
// a proxy that logs in to it with the login node as its authority.
type sshHop struct {
	HostName          string
	Port              int
	User              string
	Timeout           time.Duration
	HostKeyAlgorithms []string       `json:",omitempty"`
	Keys              []delegatedKey // offered in this order
}

// delegatedKey is a public key the login node signs with for a proxy.
type delegatedKey struct {
	Key        []byte   // SSH wire format
	Algorithms []string // signature algorithms it signs with
}

// lostReport is a host that a proxy lost (its link ended before all its
// ranks were reported ended), with every rank of its subtree.
type lostReport struct {
	Host   string
	Reason string
	Ranks  []int
}

// subtreeRanks returns the ranks of this spec's host and of every host
// below it.
func (s *launchSpec) subtreeRanks() []int {
	out := append([]int(nil), s.Ranks...)
	for i := range s.Children {
		out = append(out, s.Children[i].Launch.subtreeRanks()...)
	}
	return out
}

// silence measures how long the far end of a link has been quiet. Until
// its first frame the far end may still be starting (a process on a busy
// host), so it gets startGrace rather than the heartbeat timeout.
type silence struct {
	since atomic.Int64 // the last frame, or the start of the link (Unix ns)
	heard atomic.Bool  // a frame came
}

// startGrace is how long a proxy may take to send its first frame.
const startGrace = 10 * time.Second

func (s *silence) start() { s.since.Store(time.Now().UnixNano()) }

func (s *silence) hear() {
	s.since.Store(time.Now().UnixNano())
	s.heard.Store(true)
}

// over returns how long the far end has been quiet, and whether that is
// more than timeout allows.
func (s *silence) over(timeout time.Duration) (time.Duration, bool) {
	d := time.Since(time.Unix(0, s.since.Load()))
	limit := timeout
	if !s.heard.Load() {
		limit = max(timeout, startGrace)
	}
	return d, d > limit
}

// heartbeatInterval is how often a link end says it is alive: every
// second, or four times within the timeout when that is shorter.
func heartbeatInterval(timeout time.Duration) time.Duration {
	if timeout > 0 && timeout/4 < time.Second {
		return max(timeout/4, 10*time.Millisecond)
	}
	return time.Second
}

// linkWriter writes frames; it is safe for concurrent use.
type linkWriter struct {
	mu  sync.Mutex
	w   *bufio.Writer
	err error
}

func newLinkWriter(w io.Writer) *linkWriter {
	return &linkWriter{w: bufio.NewWriterSize(w, 64<<10)}
}

// send writes one frame made of typ and the concatenation of parts, and
// flushes it.
func (l *linkWriter) send(typ byte, parts ...[]byte) error {
	n := 1
	for _, p := range parts {
		n += len(p)
	}
	if n > maxLinkFrame {
		return fmt.Errorf("link: frame of %d bytes exceeds %d", n, maxLinkFrame)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	var hdr [5]byte
	binary.BigEndian.PutUint32(hdr[:4], uint32(n))
	hdr[4] = typ
	l.w.Write(hdr[:])
	for _, p := range parts {
		l.w.Write(p)
	}
	l.err = l.w.Flush()
	return l.err
}

func (l *linkWriter) sendJSON(typ byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return l.send(typ, b)
}

// uv encodes unsigned varints.
func uv(vals ...uint64) []byte {
	b := make([]byte, 0, 10*len(vals))
	for _, v := range vals {
		b = binary.AppendUvarint(b, v)
	}
	return b
}

// readLinkFrame reads one frame: its type and payload.
func readLinkFrame(r *bufio.Reader) (byte, []byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < 1 || n > maxLinkFrame {
		return 0, nil, fmt.Errorf("link: bad frame length %d", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return 0, nil, fmt.Errorf("link: short frame: %w", err)
	}
	return b[0], b[1:], nil
}

var errLinkPayload = errors.New("link: malformed payload")

// payload decodes the unsigned varints at the front of a payload and
// returns them with the rest.
func payload(b []byte, n int) ([]uint64, []byte, error) {
	vals := make([]uint64, n)
	for i := range vals {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return nil, nil, errLinkPayload
		}
		vals[i] = v
		b = b[k:]
	}
	return vals, b, nil
}

// exitPayload encodes a rank's end: its code, or the signal that killed it.
func exitPayload(rank int, code int, sig int) []byte {
	b := binary.AppendUvarint(nil, uint64(rank))
	b = binary.AppendVarint(b, int64(code))
	return binary.AppendUvarint(b, uint64(sig))
}

func decodeExit(b []byte) (rank, code, sig int, err error) {
	r, k := binary.Uvarint(b)
	if k <= 0 {
		return 0, 0, 0, errLinkPayload
	}
	b = b[k:]
	c, k := binary.Varint(b)
	if k <= 0 {
		return 0, 0, 0, errLinkPayload
	}
	b = b[k:]
	s, k := binary.Uvarint(b)
	if k <= 0 {
		return 0, 0, 0, errLinkPayload
	}
	return int(r), int(c), int(s), nil
}

// streamTable holds the relayed rendezvous connections of one link, by
// stream id; both ends of the link use one.
type streamTable struct {
	mu sync.Mutex
	m  map[uint64]net.Conn
}

func (t *streamTable) add(id uint64, c net.Conn) {
	t.mu.Lock()
	if t.m == nil {
		t.m = map[uint64]net.Conn{}
	}
	t.m[id] = c
	t.mu.Unlock()
}

// deliver handles a linkRVData or linkRVClose frame from the other end.
func (t *streamTable) deliver(typ byte, body []byte) error {
	v, rest, err := payload(body, 1)
	if err != nil {
		return err
	}
	t.mu.Lock()
	c := t.m[v[0]]
	if typ == linkRVClose {
		delete(t.m, v[0])
	}
	t.mu.Unlock()
	switch {
	case c == nil:
	case typ == linkRVClose:
		c.Close()
	default:
		c.Write(rest)
	}
	return nil
}

// pump sends what c reads to the other end as stream id, then tells it the
// stream closed (unless the other end closed it first), and closes c.
func (t *streamTable) pump(w *linkWriter, id uint64, c net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			w.send(linkRVData, uv(id), buf[:n])
		}
		if err != nil {
			break
		}
	}
	t.mu.Lock()
	_, open := t.m[id]
	delete(t.m, id)
	t.mu.Unlock()
	if open {
		w.send(linkRVClose, uv(id))
	}
	c.Close()
}

// closeAll closes every stream.
func (t *streamTable) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, c := range t.m {
		c.Close()
		delete(t.m, id)
	}
}
