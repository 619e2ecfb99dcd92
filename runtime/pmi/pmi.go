// Package pmi speaks the PMI-2 wire protocol of process managers such as
// Slurm (`srun --mpi=pmi2`) and MPICH's Hydra, so that a jiarun program
// started by them, without jiarun, still finds its rank, its size and its
// peers.
//
// The protocol runs over a descriptor the process manager passes in PMI_FD
// (or a TCP address in PMI_PORT). It opens with one PMI-1 line,
//
//	cmd=init pmi_version=2 pmi_subversion=0\n
//
// answered by `cmd=response_to_init ... rc=0`, and continues with PMI-2
// commands: a 6-character decimal length field (left-aligned, padded with
// spaces) followed by `cmd=NAME;key=value;...;`, where a ';' inside a value
// is doubled. Every request has a `NAME-response` reply with `rc=0` on
// success (and `errmsg=` otherwise). The client uses fullinit, kvs-put,
// kvs-fence, kvs-get, abort and finalize.
package pmi

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Limits of the PMI-2 protocol.
const (
	MaxKeyLen     = 64
	MaxValLen     = 1024
	maxCommandLen = 64 * 1024
	lenFieldSize  = 6
)

// Command is one PMI-2 command: its name and its key/value pairs in order.
type Command struct {
	Name  string
	Pairs [][2]string
}

// Get returns the value of key and whether it is present.
func (c Command) Get(key string) (string, bool) {
	for _, p := range c.Pairs {
		if p[0] == key {
			return p[1], true
		}
	}
	return "", false
}

// Encode returns the command in wire form, length field included.
func (c Command) Encode() ([]byte, error) {
	var b strings.Builder
	b.WriteString("cmd=")
	b.WriteString(strings.ReplaceAll(c.Name, ";", ";;"))
	b.WriteByte(';')
	for _, p := range c.Pairs {
		if len(p[0]) > MaxKeyLen || strings.ContainsAny(p[0], "=;") || p[0] == "" {
			return nil, fmt.Errorf("pmi: bad key %q", p[0])
		}
		if len(p[1]) > MaxValLen {
			return nil, fmt.Errorf("pmi: value of %q is %d bytes, more than %d", p[0], len(p[1]), MaxValLen)
		}
		b.WriteString(p[0])
		b.WriteByte('=')
		b.WriteString(strings.ReplaceAll(p[1], ";", ";;"))
		b.WriteByte(';')
	}
	body := b.String()
	if len(body) >= maxCommandLen {
		return nil, fmt.Errorf("pmi: command %s of %d bytes is too long", c.Name, len(body))
	}
	n := strconv.Itoa(len(body))
	return []byte(n + strings.Repeat(" ", lenFieldSize-len(n)) + body), nil
}

// ReadCommand reads one length-prefixed PMI-2 command.
func ReadCommand(r io.Reader) (Command, error) {
	var lf [lenFieldSize]byte
	if _, err := io.ReadFull(r, lf[:]); err != nil {
		return Command{}, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(lf[:])))
	if err != nil || n <= 0 || n >= maxCommandLen {
		return Command{}, fmt.Errorf("pmi: bad length field %q", lf[:])
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return Command{}, fmt.Errorf("pmi: short command: %w", err)
	}
	return ParseCommand(string(body))
}

// ParseCommand parses the body of a command (without the length field).
func ParseCommand(s string) (Command, error) {
	var pairs [][2]string
	for len(s) > 0 {
		eq := strings.IndexByte(s, '=')
		if eq <= 0 {
			return Command{}, fmt.Errorf("pmi: malformed pair in %q", s)
		}
		key := s[:eq]
		s = s[eq+1:]
		var val strings.Builder
		for {
			i := strings.IndexByte(s, ';')
			if i < 0 {
				return Command{}, fmt.Errorf("pmi: value of %q not terminated by ';'", key)
			}
			val.WriteString(s[:i])
			if i+1 < len(s) && s[i+1] == ';' {
				val.WriteByte(';')
				s = s[i+2:]
				continue
			}
			s = s[i+1:]
			break
		}
		pairs = append(pairs, [2]string{key, val.String()})
	}
	if len(pairs) == 0 || pairs[0][0] != "cmd" {
		return Command{}, errors.New("pmi: command does not start with cmd=")
	}
	return Command{Name: pairs[0][1], Pairs: pairs[1:]}, nil
}

// Client is one process's PMI-2 session.
type Client struct {
	rw    io.ReadWriter
	br    *bufio.Reader
	Rank  int
	Size  int
	JobID string
}

// Init opens a PMI-2 session on rw (the PMI_FD descriptor): the PMI-1
// version handshake, then fullinit. jobID and rank are what the process
// manager put in PMI_JOBID and PMI_RANK ("" and -1 if absent).
func Init(rw io.ReadWriter, jobID string, rank int) (*Client, error) {
	c := &Client{rw: rw, br: bufio.NewReader(rw)}
	if _, err := io.WriteString(rw, "cmd=init pmi_version=2 pmi_subversion=0\n"); err != nil {
		return nil, fmt.Errorf("pmi: init: %w", err)
	}
	line, err := c.br.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("pmi: init: %w", err)
	}
	f := map[string]string{}
	for _, kv := range strings.Fields(line) {
		k, v, _ := strings.Cut(kv, "=")
		f[k] = v
	}
	if f["cmd"] != "response_to_init" || f["rc"] != "0" {
		return nil, fmt.Errorf("pmi: init refused: %q (this process manager may not offer PMI version 2)", strings.TrimSpace(line))
	}
	req := Command{Name: "fullinit"}
	if jobID != "" {
		req.Pairs = append(req.Pairs, [2]string{"pmijobid", jobID})
	}
	if rank >= 0 {
		req.Pairs = append(req.Pairs, [2]string{"pmirank", strconv.Itoa(rank)})
	}
	req.Pairs = append(req.Pairs, [2]string{"threaded", "FALSE"})
	resp, err := c.call(req)
	if err != nil {
		return nil, err
	}
	if c.Rank, err = intField(resp, "rank"); err != nil {
		return nil, err
	}
	if c.Size, err = intField(resp, "size"); err != nil {
		return nil, err
	}
	c.JobID = jobID
	if c.Rank < 0 || c.Rank >= c.Size {
		return nil, fmt.Errorf("pmi: fullinit: rank %d outside size %d", c.Rank, c.Size)
	}
	return c, nil
}

func intField(c Command, key string) (int, error) {
	v, ok := c.Get(key)
	if !ok {
		return 0, fmt.Errorf("pmi: %s: no %s", c.Name, key)
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("pmi: %s: %s=%q is not a number", c.Name, key, v)
	}
	return n, nil
}

// call sends req and reads its response, checking rc.
func (c *Client) call(req Command) (Command, error) {
	b, err := req.Encode()
	if err != nil {
		return Command{}, err
	}
	if _, err := c.rw.Write(b); err != nil {
		return Command{}, fmt.Errorf("pmi: %s: %w", req.Name, err)
	}
	resp, err := ReadCommand(c.br)
	if err != nil {
		return Command{}, fmt.Errorf("pmi: %s: %w", req.Name, err)
	}
	if resp.Name != req.Name+"-response" {
		return Command{}, fmt.Errorf("pmi: %s: unexpected reply %q", req.Name, resp.Name)
	}
	if rc, _ := resp.Get("rc"); rc != "0" {
		msg, _ := resp.Get("errmsg")
		return Command{}, fmt.Errorf("pmi: %s failed (rc=%s): %s", req.Name, rc, msg)
	}
	return resp, nil
}

// Put stores key=value for the other processes to get after the next Fence.
func (c *Client) Put(key, value string) error {
	_, err := c.call(Command{Name: "kvs-put", Pairs: [][2]string{{"key", key}, {"value", value}}})
	return err
}

// Fence waits until every process has reached the fence; what was put
// before it is then visible to Get.
func (c *Client) Fence() error {
	_, err := c.call(Command{Name: "kvs-fence"})
	return err
}

// Get returns the value of key, put by any process before the last fence.
func (c *Client) Get(key string) (string, error) {
	resp, err := c.call(Command{Name: "kvs-get", Pairs: [][2]string{{"jobid", c.JobID}, {"srcid", "-1"}, {"key", key}}})
	if err != nil {
		return "", err
	}
	if found, _ := resp.Get("found"); !strings.EqualFold(found, "TRUE") {
		return "", fmt.Errorf("pmi: kvs-get %q: not found", key)
	}
	v, _ := resp.Get("value")
	return v, nil
}

// Abort asks the process manager to end the whole job.
func (c *Client) Abort(msg string) error {
	b, err := Command{Name: "abort", Pairs: [][2]string{{"isworld", "TRUE"}, {"msg", truncate(msg, MaxValLen)}}}.Encode()
	if err != nil {
		return err
	}
	_, err = c.rw.Write(b)
	return err
}

// Finalize ends the session.
func (c *Client) Finalize() error {
	_, err := c.call(Command{Name: "finalize"})
	return err
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
