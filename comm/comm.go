package comm

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"sync/atomic"

	"github.com/jiarun/jia/comm/transport"
)

// Transport is what a Comm runs on; see package transport.
type Transport = transport.Transport

// Comm is a communicator: a group of ranks and a communication context of
// their own. Traffic on one communicator never matches a receive on
// another. A Comm may be used by several goroutines of its rank at once for
// point-to-point calls; collectives and Dup, Split and Free on one Comm
// must be called by one goroutine at a time, in the same order on every
// member (as MPI requires).
type Comm struct {
	p     *proc
	id    uint32 // context id; point-to-point traffic uses 2·id, collectives 2·id+1
	rank  int
	size  int
	group []int // communicator rank → transport rank; nil: identity
	name  string
	world bool
	freed atomic.Bool

	tune    tuning
	scratch [4][]byte
	nchild  int

	shape int8  // hierarchy of hosts: 0 not yet known, shapeFlat, shapeHier
	hier  *hier // the per-host and leaders communicators, built on first use
}

// NewWorld starts message passing on tr and returns the communicator of
// all its ranks. Call it once per rank; opt may be nil.
func NewWorld(tr Transport, opt *Options) (*Comm, error) {
	var o Options
	if opt != nil {
		o = *opt
	}
	p, err := newProc(tr, o)
	if err != nil {
		return nil, err
	}
	return &Comm{p: p, rank: p.rank, size: p.size, name: "world", world: true, tune: defaultTuning}, nil
}

// Rank returns this rank's number in c, 0 ≤ Rank < Size.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks in c.
func (c *Comm) Size() int { return c.size }

// Name returns c's name, used in error messages: "world", or the parent's
// name with "/dup" or "/split(color)".
func (c *Comm) Name() string { return c.name }

// WorldRank returns the rank in the world (the transport's rank) of rank r
// of c.
func (c *Comm) WorldRank(r int) int {
	if c.group == nil {
		return r
	}
	return c.group[r]
}

func (c *Comm) ctx() uint32  { return 2 * c.id }
func (c *Comm) cctx() uint32 { return 2*c.id + 1 }

func (c *Comm) errorf(call string, peer, tag int, class error, format string, args ...any) error {
	d := ""
	if format != "" {
		d = fmt.Sprintf(format, args...)
	}
	name := "<nil>"
	if c != nil {
		name = c.name
	}
	return &Error{Call: call, Comm: name, Peer: peer, Tag: tag, Err: class, Detail: d}
}

// check returns the error for a call on a nil or freed communicator.
func (c *Comm) check(call string) error {
	if c == nil {
		return &Error{Call: call, Comm: "<nil>", Peer: noPeer, Tag: noTag, Err: ErrComm}
	}
	if c.freed.Load() {
		return c.errorf(call, noPeer, noTag, ErrCommFreed, "")
	}
	return nil
}

// Dup returns a new communicator with the same ranks as c and a context of
// its own (MPI_Comm_dup). It is collective over c.
func (c *Comm) Dup() (*Comm, error) {
	if err := c.check("Dup"); err != nil {
		return nil, err
	}
	id, err := c.allocContext()
	if err != nil {
		return nil, err
	}
	c.nchild++
	n := &Comm{p: c.p, id: id, rank: c.rank, size: c.size, group: c.group,
		name: c.name + "/dup", tune: c.tune}
	return n, nil
}

// Split partitions c (MPI_Comm_split): ranks that pass the same color form
// a new communicator, ordered by key and then by their rank in c. A rank
// that passes Undefined gets nil. It is collective over c.
func (c *Comm) Split(color, key int) (*Comm, error) {
	if err := c.check("Split"); err != nil {
		return nil, err
	}
	if color < 0 && color != Undefined {
		return nil, c.errorf("Split", noPeer, noTag, ErrCount, "negative color %d", color)
	}
	mine := []int64{int64(color), int64(key)}
	all := make([]int64, 2*c.size)
	if err := Allgather(c, mine, all); err != nil {
		return nil, err
	}
	id, err := c.allocContext()
	if err != nil {
		return nil, err
	}
	if color == Undefined {
		return nil, nil
	}
	type member struct{ key, rank int }
	var ms []member
	for r := 0; r < c.size; r++ {
		if all[2*r] == int64(color) {
			ms = append(ms, member{int(all[2*r+1]), r})
		}
	}
	slices.SortStableFunc(ms, func(a, b member) int {
		return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.rank, b.rank))
	})
	n := &Comm{p: c.p, id: id, size: len(ms), group: make([]int, len(ms)),
		name: fmt.Sprintf("%s/split(%d)", c.name, color), tune: c.tune}
	for i, m := range ms {
		n.group[i] = c.WorldRank(m.rank)
		if m.rank == c.rank {
			n.rank = i
		}
	}
	return n, nil
}

// allocContext picks the lowest context id free on every rank of c.
func (c *Comm) allocContext() (uint32, error) {
	var id [1]uint32
	err := c.allocContexts("Dup", id[:])
	return id[0], err
}

// allocContexts fills ids with the lowest context ids free on every rank
// of c, with one (flat) Allreduce.
func (c *Comm) allocContexts(call string, ids []uint32) error {
	p := c.p
	var free [ctxWords]uint64
	p.mu.Lock()
	for i := range free {
		free[i] = ^p.ctxUsed[i]
	}
	p.mu.Unlock()
	red, err := reducerFor[uint64](BAnd)
	if err != nil {
		return c.errorf(call, noPeer, noTag, err, "")
	}
	if c.size > 1 {
		if err := c.allreduceFlat(asBytes(free[:]), red, len(free)); err != nil {
			return err
		}
	}
	k := 0
	for i := 0; i < ctxWords && k < len(ids); i++ {
		for w := free[i]; w != 0 && k < len(ids); w &= w - 1 {
			ids[k] = uint32(i*64 + bits.TrailingZeros64(w))
			k++
		}
	}
	if k < len(ids) {
		return c.errorf(call, noPeer, noTag, ErrComm, "all %d contexts are in use", maxContexts)
	}
	p.mu.Lock()
	for _, id := range ids {
		p.ctxUsed[id/64] |= 1 << (id % 64)
	}
	p.mu.Unlock()
	return nil
}

// Free releases c (MPI_Comm_free). Operations on c afterwards fail with
// ErrCommFreed. Messages still in flight on c are lost. The world cannot
// be freed.
func (c *Comm) Free() error {
	if err := c.check("Free"); err != nil {
		return err
	}
	if c.world {
		return c.errorf("Free", noPeer, noTag, ErrComm, "the world communicator cannot be freed")
	}
	if c.freed.Swap(true) {
		return c.errorf("Free", noPeer, noTag, ErrCommFreed, "")
	}
	p := c.p
	p.mu.Lock()
	if c.hier != nil {
		for _, id := range c.hier.ids {
			p.ctxUsed[id/64] &^= 1 << (id % 64)
			p.eng.Discard(2 * id)
			p.eng.Discard(2*id + 1)
		}
	}
	p.ctxUsed[c.id/64] &^= 1 << (c.id % 64)
	p.eng.Discard(c.ctx())
	p.eng.Discard(c.cctx())
	p.run()
	p.mu.Unlock()
	return nil
}

// scratchBuf returns c's scratch buffer i with n bytes (collectives'
// temporaries; reused across calls).
func (c *Comm) scratchBuf(i, n int) []byte {
	b := c.scratch[i]
	if cap(b) < n {
		b = make([]byte, n, max(n, 2*cap(b)))
		c.scratch[i] = b
	}
	return b[:n]
}
