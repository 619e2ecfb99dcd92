package comm

// Two-level collectives. When the ranks of a communicator span several
// hosts and at least one host holds more than one of them, Barrier, Bcast,
// Reduce and Allreduce (with a commutative operation) work within each
// host first, through whatever the transport uses between ranks of one
// host (shared memory), and only the first rank of each host (its leader)
// talks to other hosts: one message per host crosses the network instead
// of one per rank, as Open MPI's "han" and MPICH's SMP-aware collectives
// do. The per-host and leaders communicators are built on first use, with
// context ids agreed by every rank of the communicator; the order of the
// reduction is fixed by the host layout, so results stay bit-identical
// from run to run.

type hier struct {
	ids        [2]uint32 // contexts of local and leaders, reserved on every rank of the parent
	local      *Comm     // the ranks of the parent on this rank's host, in the parent's order
	leaders    *Comm     // the first rank of the parent on each host; nil unless this rank leads
	localRank  []int     // parent rank → its rank in its host's local communicator
	leaderRank []int     // parent rank → the rank in leaders of its host's leader
}

const (
	shapeFlat int8 = iota + 1
	shapeHier
)

// useHier tells whether collective k runs in two levels on c: the ranks of
// c span several hosts, some host holds several of them, and no other
// algorithm was forced.
func (c *Comm) useHier(k collKind) bool {
	if a := c.force(k); a != algAuto && a != algHier {
		return false
	}
	if c.shape == 0 {
		c.shape = c.computeShape()
	}
	return c.shape == shapeHier
}

func (c *Comm) computeShape() int8 {
	host := c.p.host
	if host == nil || c.size < 3 {
		return shapeFlat
	}
	seen := make(map[int]bool)
	for r := 0; r < c.size; r++ {
		seen[host[c.WorldRank(r)]] = true
	}
	if len(seen) == 1 || len(seen) == c.size {
		return shapeFlat
	}
	return shapeHier
}

// getHier returns c's two levels, building them (collectively) on first
// use.
func (c *Comm) getHier(call string) (*hier, error) {
	if c.hier != nil {
		return c.hier, nil
	}
	h := &hier{localRank: make([]int, c.size), leaderRank: make([]int, c.size)}
	if err := c.allocContexts(call, h.ids[:]); err != nil {
		return nil, err
	}
	host := func(r int) int { return c.p.host[c.WorldRank(r)] }
	type group struct{ leader, n int }
	groups := make(map[int]*group)
	var local, leaders []int // world ranks
	for r := 0; r < c.size; r++ {
		g := groups[host(r)]
		if g == nil {
			g = &group{leader: len(groups)}
			groups[host(r)] = g
			leaders = append(leaders, c.WorldRank(r))
		}
		h.localRank[r], h.leaderRank[r] = g.n, g.leader
		g.n++
		if host(r) == host(c.rank) {
			local = append(local, c.WorldRank(r))
		}
	}
	h.local = &Comm{p: c.p, id: h.ids[0], rank: h.localRank[c.rank], size: len(local), group: local,
		name: c.name + "/host", tune: defaultTuning, shape: shapeFlat}
	if h.localRank[c.rank] == 0 {
		h.leaders = &Comm{p: c.p, id: h.ids[1], rank: h.leaderRank[c.rank], size: len(leaders), group: leaders,
			name: c.name + "/leaders", tune: defaultTuning, shape: shapeFlat}
	}
	c.hier = h
	return h, nil
}

// barrierHier: every host's ranks report to its leader, the leaders meet,
// and each leader releases its host.
func (c *Comm) barrierHier() error {
	h, err := c.getHier("Barrier")
	if err != nil {
		return err
	}
	if err := h.local.fanIn("Barrier", tagBarrier); err != nil {
		return err
	}
	if h.leaders != nil {
		if err := h.leaders.Barrier(); err != nil {
			return err
		}
	}
	return h.local.fanOut("Barrier", tagBarrier)
}

// fanIn returns at rank 0 of c once every rank of c has entered it: zero-
// byte messages up a binomial tree.
func (c *Comm) fanIn(call string, tag int) error {
	for mask := 1; mask < c.size; mask <<= 1 {
		if c.rank&mask != 0 {
			return c.csend(call, nil, c.rank-mask, tag)
		}
		if c.rank+mask < c.size {
			if err := c.crecv(call, nil, c.rank+mask, tag); err != nil {
				return err
			}
		}
	}
	return nil
}

// fanOut releases every rank of c from rank 0: zero-byte messages down a
// binomial tree.
func (c *Comm) fanOut(call string, tag int) error {
	mask := 1
	for mask < c.size {
		if c.rank&mask != 0 {
			if err := c.crecv(call, nil, c.rank-mask, tag); err != nil {
				return err
			}
			break
		}
		mask <<= 1
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if c.rank+mask < c.size {
			if err := c.csend(call, nil, c.rank+mask, tag); err != nil {
				return err
			}
		}
	}
	return nil
}

// bcastHier: on the root's host the root broadcasts to its host; then the
// leaders broadcast from the root's leader; then every other leader
// broadcasts to its host.
func (c *Comm) bcastHier(b []byte, es, root int) error {
	h, err := c.getHier("Bcast")
	if err != nil {
		return err
	}
	rootsHost := h.leaderRank[root] == h.leaderRank[c.rank]
	if rootsHost {
		if err := h.local.bcast(b, es, h.localRank[root]); err != nil {
			return err
		}
	}
	if h.leaders != nil {
		if err := h.leaders.bcast(b, es, h.leaderRank[root]); err != nil {
			return err
		}
	}
	if rootsHost {
		return nil
	}
	return h.local.bcast(b, es, 0)
}

// reduceHier (commutative operations): every host reduces to its leader,
// the leaders reduce to the root's leader, which hands the result to the
// root.
func (c *Comm) reduceHier(sb, rb []byte, red reducer, root, count int) error {
	const call = "Reduce"
	h, err := c.getHier(call)
	if err != nil {
		return err
	}
	part := c.scratchBuf(0, len(sb))
	if err := h.local.reduce(sb, part, red, 0, count); err != nil {
		return err
	}
	rootsHost := h.leaderRank[root] == h.leaderRank[c.rank]
	if h.leaders != nil {
		out := c.scratchBuf(1, len(sb))
		if c.rank == root {
			out = rb
		}
		if err := h.leaders.reduce(part, out, red, h.leaderRank[root], count); err != nil {
			return err
		}
		if rootsHost && c.rank != root {
			return h.local.csend(call, out, h.localRank[root], tagReduce)
		}
		return nil
	}
	if c.rank == root {
		return h.local.crecv(call, rb, 0, tagReduce)
	}
	return nil
}

// allreduceHier (commutative operations): every host reduces to its
// leader, the leaders allreduce, and every leader broadcasts to its host.
func (c *Comm) allreduceHier(rb []byte, red reducer, count int) error {
	h, err := c.getHier("Allreduce")
	if err != nil {
		return err
	}
	part := c.scratchBuf(0, len(rb))
	if err := h.local.reduce(rb, part, red, 0, count); err != nil {
		return err
	}
	if h.leaders != nil {
		copy(rb, part)
		if err := h.leaders.allreduce(rb, red, count); err != nil {
			return err
		}
	}
	return h.local.bcast(rb, len(rb)/count, 0)
}
