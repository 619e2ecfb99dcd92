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
	linkPing      byte = 7 // the root is alive (every second)

	// proxy → root
	linkStarted   byte = 0x81 // uvarint rank, uvarint pid
	linkOutput    byte = 0x82 // uvarint rank, byte stream (1 stdout, 2 stderr), whole lines
	linkExit      byte = 0x83 // uvarint rank, varint code (-1 if signalled), uvarint signal
	linkFatal     byte = 0x84 // a message: the proxy failed and is exiting
	linkDone      byte = 0x85 // every rank exited and its output was sent
	linkStageNeed byte = 0x86 // send the file
	linkStaged    byte = 0x87 // the file's path on the host

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
	// HeartbeatTimeout is how long the proxy waits without a frame from
	// the root before it kills its ranks and exits.
	HeartbeatTimeout time.Duration
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
