// Package qpbind holds what comm's bindings onto rdmaio queue pairs
// (comm/qtransport over RC, comm/udtransport over UD) share: the all-gather
// they connect through and its in-process form, the connection handshake
// in which a failure on one rank fails every rank, a bounds-checked decoder
// for the cards they exchange, the sorting of peers among devices, the
// posting of receive buffers and the release of a device's objects, the
// gathering of a message's pieces, and a reusable waiting context for
// CQ.Wait.
package qpbind

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
)

// Exchange is an all-gather: every rank calls it with the same key and its
// own value and gets every rank's value, indexed by rank.
type Exchange func(ctx context.Context, key string, value []byte) ([][]byte, error)

// LocalExchange returns all-gather functions for n ranks that are
// goroutines of one process: rank r calls the r-th. A key may be used
// again once every rank has returned from its previous use.
func LocalExchange(n int) []Exchange {
	g := &localGather{n: n, rounds: map[string]*gatherRound{}}
	out := make([]Exchange, n)
	for r := range out {
		out[r] = func(ctx context.Context, key string, value []byte) ([][]byte, error) {
			return g.exchange(ctx, r, key, value)
		}
	}
	return out
}

type localGather struct {
	n      int
	mu     sync.Mutex
	rounds map[string]*gatherRound
}

type gatherRound struct {
	vals  [][]byte
	got   int
	taken int
	done  chan struct{}
}

func (g *localGather) exchange(ctx context.Context, r int, key string, value []byte) ([][]byte, error) {
	if r < 0 || r >= g.n {
		return nil, fmt.Errorf("local exchange %q: rank %d of %d", key, r, g.n)
	}
	g.mu.Lock()
	rd := g.rounds[key]
	if rd == nil {
		rd = &gatherRound{vals: make([][]byte, g.n), done: make(chan struct{})}
		g.rounds[key] = rd
	}
	if rd.vals[r] != nil {
		g.mu.Unlock()
		return nil, fmt.Errorf("local exchange %q: rank %d called twice", key, r)
	}
	rd.vals[r] = append([]byte{}, value...)
	rd.got++
	if rd.got == g.n {
		close(rd.done)
	}
	g.mu.Unlock()
	select {
	case <-rd.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("local exchange %q: rank %d: %w", key, r, ctx.Err())
	}
	out := make([][]byte, g.n)
	for i, v := range rd.vals {
		out[i] = append([]byte(nil), v...)
	}
	g.mu.Lock()
	if rd.taken++; rd.taken == g.n {
		delete(g.rounds, key)
	}
	g.mu.Unlock()
	return out, nil
}

// Handshake is how a binding's ranks connect, in two all-gathers: each
// rank publishes its card (or, if its local setup failed, its error), reads
// the others' with connect, then publishes whether it connected. Every rank
// thus fails together, naming the rank that failed first, instead of
// waiting for one that gave up.
type Handshake struct {
	// Exchange is the all-gather.
	Exchange Exchange
	// CardKey and ReadyKey are the keys of the two rounds.
	CardKey, ReadyKey string
	// Magic starts a published error, so that it is never taken for a card.
	Magic string
	// Size is the number of ranks.
	Size int
	// Errorf makes the binding's errors (with its name and rank).
	Errorf func(format string, args ...any) error
}

// Run runs the handshake with this rank's card, or its setup error, and
// connect, which reads every rank's card (it is not called after a setup
// error). It returns the first error of any rank.
func (h Handshake) Run(ctx context.Context, card []byte, setupErr error, connect func(cards [][]byte) error) error {
	blob := card
	if setupErr != nil {
		blob = h.errorBlob(setupErr)
	}
	cards, err := h.Exchange(ctx, h.CardKey, blob)
	if err != nil {
		return h.Errorf("new: exchange of queue pairs: %w", err)
	}
	connErr := setupErr
	if connErr == nil {
		connErr = connect(cards)
	}
	status := []byte{0}
	if connErr != nil {
		status = h.errorBlob(connErr)
	}
	states, err := h.Exchange(ctx, h.ReadyKey, status)
	switch {
	case connErr != nil:
		return connErr
	case err != nil:
		return h.Errorf("new: exchange of readiness: %w", err)
	}
	if len(states) != h.Size {
		return h.Errorf("new: exchange returned %d states for %d ranks", len(states), h.Size)
	}
	for j, s := range states {
		if err := h.RemoteError(j, s); err != nil {
			return h.Errorf("new: %w", err)
		}
		if len(s) != 1 || s[0] != 0 {
			return h.Errorf("new: rank %d: malformed readiness", j)
		}
	}
	return nil
}

func (h Handshake) errorBlob(err error) []byte {
	msg := err.Error()
	if len(msg) > 1000 {
		msg = msg[:1000]
	}
	return append([]byte(h.Magic), msg...)
}

// RemoteError returns the error rank published, if its blob is one.
func (h Handshake) RemoteError(rank int, b []byte) error {
	if len(b) >= len(h.Magic) && string(b[:len(h.Magic)]) == h.Magic {
		return fmt.Errorf("rank %d failed: %s", rank, b[len(h.Magic):])
	}
	return nil
}

// Reader decodes a little-endian card. A read past the end yields zeros and
// marks the Reader bad, so a decoder reads everything and checks OK once.
type Reader struct {
	b   []byte
	off int
	bad bool
}

// NewReader returns a Reader of b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// OK reports whether every read so far was within the data.
func (r *Reader) OK() bool { return !r.bad }

// Left returns the number of bytes not read yet.
func (r *Reader) Left() int { return len(r.b) - r.off }

// Bytes returns the next n bytes (aliasing the data), or nil past the end.
func (r *Reader) Bytes(n int) []byte {
	if r.bad || n < 0 || len(r.b)-r.off < n {
		r.bad = true
		return nil
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s
}

// U8 reads a byte.
func (r *Reader) U8() byte {
	if s := r.Bytes(1); s != nil {
		return s[0]
	}
	return 0
}

// U16 reads a little-endian uint16.
func (r *Reader) U16() uint16 {
	if s := r.Bytes(2); s != nil {
		return binary.LittleEndian.Uint16(s)
	}
	return 0
}

// U32 reads a little-endian uint32.
func (r *Reader) U32() uint32 {
	if s := r.Bytes(4); s != nil {
		return binary.LittleEndian.Uint32(s)
	}
	return 0
}

// U64 reads a little-endian uint64.
func (r *Reader) U64() uint64 {
	if s := r.Bytes(8); s != nil {
		return binary.LittleEndian.Uint64(s)
	}
	return 0
}
