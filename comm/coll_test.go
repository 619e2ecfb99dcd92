package comm

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jiarun/jia/comm/memtransport"
)

// val is rank r's i-th input: small integers in float64, so that sums and
// products are exact whatever the order.
func val(r, i int) float64 { return float64((r*131+i*7)%19) - 9 }

// mval is rank r's i-th input for collectives that only move data: a
// value in [1, 2) with a pseudo-random mantissa, so that every byte
// matters.
func mval(r, i int) float64 {
	h := uint64(r)*0x9e3779b97f4a7c15 + uint64(i)*0xbf58476d1ce4e5b9 + 1
	h ^= h >> 31
	h *= 0x94d049bb133111eb
	h ^= h >> 29
	return math.Float64frombits(h&(1<<52-1) | 0x3ff<<52)
}

func mvals(r, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = mval(r, i)
	}
	return v
}

func vals(r, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = val(r, i)
	}
	return v
}

// concat is a non-commutative, associative operation on decimal digit
// strings held in int64: concat(a, b) = the digits of a followed by those
// of b. Reducing the ranks' digits in rank order spells "123…".
var concat = NewOp("concat", false, func(in, inout []int64) {
	for i := range inout {
		b := inout[i]
		m := int64(10)
		for t := b / 10; t > 0; t /= 10 {
			m *= 10
		}
		inout[i] = in[i]*m + b
	}
})

func digit(r, i int) int64 { return int64((r+i)%9 + 1) }

func digits(r, n int) []int64 {
	v := make([]int64, n)
	for i := range v {
		v[i] = digit(r, i)
	}
	return v
}

// concatRef is the reduction of ranks lo..hi-1 at element i.
func concatRef(lo, hi, i int) int64 {
	s := ""
	for r := lo; r < hi; r++ {
		s += strconv.FormatInt(digit(r, i), 10)
	}
	v, _ := strconv.ParseInt(s, 10, 64)
	return v
}

func sumRef(lo, hi, i int) float64 {
	s := 0.0
	for r := lo; r < hi; r++ {
		s += val(r, i)
	}
	return s
}

func eqf(a, b []float64) error {
	if len(a) != len(b) {
		return fmt.Errorf("length %d, want %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			return fmt.Errorf("element %d: %v, want %v", i, a[i], b[i])
		}
	}
	return nil
}

type collCase struct {
	kind collKind
	algs []algo
}

// algorithms to force for each collective (algAuto: the size-based choice).
var collAlgs = map[collKind][]algo{
	kBarrier:       {algAuto, algHier},
	kBcast:         {algAuto, algBinomial, algScatterRing, algLinear, algHier},
	kReduce:        {algAuto, algBinomial, algRabenseifner, algHier},
	kAllreduce:     {algAuto, algRecDoubling, algRabenseifner, algRing, algDirect, algGatherAll, algHier},
	kAllgather:     {algAuto, algRecDoubling, algBruck, algRing},
	kAlltoall:      {algAuto, algBruck, algScattered, algPairwise},
	kGather:        {algAuto, algBinomial, algLinear},
	kScatter:       {algAuto, algBinomial, algLinear},
	kReduceScatter: {algAuto, algPairwise, algReduceScatterv},
}

var collSizes = []int{0, 1, 5, 67, 3000}

// TestCollectives checks every collective, every algorithm and a few sizes
// against locally computed references on 1 to 9 ranks.
func TestCollectives(t *testing.T) {
	for n := 1; n <= 9; n++ {
		t.Run(fmt.Sprint(n, "ranks"), func(t *testing.T) {
			t.Parallel()
			run(t, n, func(c *Comm) error {
				for _, size := range collSizes {
					if err := collAll(c, size); err != nil {
						return fmt.Errorf("size %d: %w", size, err)
					}
				}
				return nil
			})
		})
	}
}

func collAll(c *Comm, m int) error {
	n, r := c.Size(), c.Rank()
	defer func() { c.tune.force = [numCollKinds]algo{} }()
	try := func(k collKind, name string, f func() error) error {
		for _, a := range collAlgs[k] {
			c.tune.force[k] = a
			if err := f(); err != nil {
				return fmt.Errorf("%s (algorithm %d): %w", name, a, err)
			}
		}
		c.tune.force[k] = algAuto
		return nil
	}
	if err := try(kBarrier, "Barrier", c.Barrier); err != nil {
		return err
	}
	// Bcast from every root.
	if err := try(kBcast, "Bcast", func() error {
		for root := 0; root < n; root++ {
			b := mvals(r, m)
			if err := Bcast(c, b, root); err != nil {
				return err
			}
			if err := eqf(b, mvals(root, m)); err != nil {
				return fmt.Errorf("root %d: %w", root, err)
			}
		}
		return nil
	}); err != nil {
		return err
	}
	// Reduce: Sum (commutative) and concat (not) at every root.
	if err := try(kReduce, "Reduce", func() error {
		for root := 0; root < n; root++ {
			out := make([]float64, m)
			if err := Reduce(c, vals(r, m), out, Sum, root); err != nil {
				return err
			}
			dout := make([]int64, m)
			if err := Reduce(c, digits(r, m), dout, concat, root); err != nil {
				return err
			}
			if r != root {
				continue
			}
			for i := range out {
				if out[i] != sumRef(0, n, i) || dout[i] != concatRef(0, n, i) {
					return fmt.Errorf("root %d element %d: %v %v, want %v %v", root, i, out[i], dout[i], sumRef(0, n, i), concatRef(0, n, i))
				}
			}
		}
		return nil
	}); err != nil {
		return err
	}
	// Allreduce: Sum, concat, in place.
	if err := try(kAllreduce, "Allreduce", func() error {
		out := make([]float64, m)
		if err := Allreduce(c, vals(r, m), out, Sum); err != nil {
			return err
		}
		d := digits(r, m)
		if err := Allreduce(c, d, d, concat); err != nil { // in place
			return err
		}
		for i := range out {
			if out[i] != sumRef(0, n, i) || d[i] != concatRef(0, n, i) {
				return fmt.Errorf("element %d: %v %v, want %v %v", i, out[i], d[i], sumRef(0, n, i), concatRef(0, n, i))
			}
		}
		return nil
	}); err != nil {
		return err
	}
	// Gather / Scatter at every root.
	if err := try(kGather, "Gather", func() error {
		for root := 0; root < n; root++ {
			var all []float64
			if r == root {
				all = make([]float64, n*m)
			}
			if err := Gather(c, mvals(r, m), all, root); err != nil {
				return err
			}
			if r == root {
				for q := 0; q < n; q++ {
					if err := eqf(all[q*m:(q+1)*m], mvals(q, m)); err != nil {
						return fmt.Errorf("root %d block %d: %w", root, q, err)
					}
				}
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := try(kScatter, "Scatter", func() error {
		for root := 0; root < n; root++ {
			var all []float64
			if r == root {
				all = mvals(1000+root, n*m)
			}
			mine := make([]float64, m)
			if err := Scatter(c, all, mine, root); err != nil {
				return err
			}
			if err := eqf(mine, mvals(1000+root, n*m)[r*m:(r+1)*m]); err != nil {
				return fmt.Errorf("root %d: %w", root, err)
			}
		}
		return nil
	}); err != nil {
		return err
	}
	// Allgather, Alltoall.
	if err := try(kAllgather, "Allgather", func() error {
		all := make([]float64, n*m)
		if err := Allgather(c, mvals(r, m), all); err != nil {
			return err
		}
		for q := 0; q < n; q++ {
			if err := eqf(all[q*m:(q+1)*m], mvals(q, m)); err != nil {
				return fmt.Errorf("block %d: %w", q, err)
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := try(kAlltoall, "Alltoall", func() error {
		send := mvals(r, n*m) // block j goes to rank j
		recv := make([]float64, n*m)
		if err := Alltoall(c, send, recv); err != nil {
			return err
		}
		for q := 0; q < n; q++ {
			if err := eqf(recv[q*m:(q+1)*m], mvals(q, n*m)[r*m:(r+1)*m]); err != nil {
				return fmt.Errorf("block from %d: %w", q, err)
			}
		}
		return nil
	}); err != nil {
		return err
	}
	// ReduceScatter with uneven counts (rank q gets m+q%2 elements), Sum
	// and concat.
	counts := make([]int, n)
	total := 0
	for q := range counts {
		counts[q] = m + q%2
		if m == 0 {
			counts[q] = 0
		}
		total += counts[q]
	}
	off := 0
	for q := 0; q < r; q++ {
		off += counts[q]
	}
	if err := try(kReduceScatter, "ReduceScatter", func() error {
		out := make([]float64, counts[r])
		if err := ReduceScatter(c, vals(r, total), out, counts, Sum); err != nil {
			return err
		}
		dout := make([]int64, counts[r])
		if err := ReduceScatter(c, digits(r, total), dout, counts, concat); err != nil {
			return err
		}
		// recv may be this rank's own block of send.
		in := vals(r, total)
		own := in[off : off+counts[r]]
		if err := ReduceScatter(c, in, own, counts, Sum); err != nil {
			return err
		}
		for i := range out {
			if out[i] != sumRef(0, n, off+i) || dout[i] != concatRef(0, n, off+i) || own[i] != out[i] {
				return fmt.Errorf("element %d: %v %v (recv inside send: %v), want %v %v", i, out[i], dout[i], own[i], sumRef(0, n, off+i), concatRef(0, n, off+i))
			}
		}
		blk := make([]float64, m)
		if err := ReduceScatterBlock(c, vals(r, n*m), blk, Sum); err != nil {
			return err
		}
		for i := range blk {
			if blk[i] != sumRef(0, n, r*m+i) {
				return fmt.Errorf("block element %d: %v", i, blk[i])
			}
		}
		return nil
	}); err != nil {
		return err
	}
	// The v-variants with uneven counts and gaps in the displacements.
	vcounts := make([]int, n)
	vdispl := make([]int, n)
	pos := 0
	for q := range vcounts {
		vcounts[q] = (m + q) % (m + 1) // 0 … m
		vdispl[q] = pos + 1            // leave a gap
		pos += vcounts[q] + 1
	}
	for root := 0; root < n; root++ {
		var all []float64
		if r == root {
			all = make([]float64, pos)
		}
		if err := Gatherv(c, mvals(r, vcounts[r]), all, vcounts, vdispl, root); err != nil {
			return err
		}
		if r == root {
			for q := 0; q < n; q++ {
				if err := eqf(all[vdispl[q]:vdispl[q]+vcounts[q]], mvals(q, vcounts[q])); err != nil {
					return fmt.Errorf("Gatherv root %d block %d: %w", root, q, err)
				}
			}
		}
		src := mvals(500+root, pos)
		mine := make([]float64, vcounts[r])
		if err := Scatterv(c, src, vcounts, vdispl, mine, root); err != nil {
			return err
		}
		if err := eqf(mine, src[vdispl[r]:vdispl[r]+vcounts[r]]); err != nil {
			return fmt.Errorf("Scatterv root %d: %w", root, err)
		}
	}
	all := make([]float64, pos)
	if err := Allgatherv(c, mvals(r, vcounts[r]), all, vcounts, vdispl); err != nil {
		return err
	}
	for q := 0; q < n; q++ {
		if err := eqf(all[vdispl[q]:vdispl[q]+vcounts[q]], mvals(q, vcounts[q])); err != nil {
			return fmt.Errorf("Allgatherv block %d: %w", q, err)
		}
	}
	// Alltoallv: rank r sends (r+j)%3 elements to rank j (packed).
	sc, rc := make([]int, n), make([]int, n)
	ssum, rsum := 0, 0
	for j := 0; j < n; j++ {
		sc[j] = (r + j) % 3 * m
		rc[j] = (j + r) % 3 * m
		ssum += sc[j]
		rsum += rc[j]
	}
	send := mvals(r, ssum)
	recv := make([]float64, rsum)
	if err := Alltoallv(c, send, sc, nil, recv, rc, nil); err != nil {
		return err
	}
	p := 0
	for j := 0; j < n; j++ {
		// What rank j sent to r: its block r, after its blocks 0..r-1.
		start := 0
		for k := 0; k < r; k++ {
			start += (j + k) % 3 * m
		}
		if err := eqf(recv[p:p+rc[j]], mvals(j, start+rc[j])[start:]); err != nil {
			return fmt.Errorf("Alltoallv from %d: %w", j, err)
		}
		p += rc[j]
	}
	// Scan and Exscan, Sum and concat.
	sout := make([]float64, m)
	if err := Scan(c, vals(r, m), sout, Sum); err != nil {
		return err
	}
	dsc := digits(r, m)
	if err := Scan(c, dsc, dsc, concat); err != nil {
		return err
	}
	eout := make([]float64, m)
	for i := range eout {
		eout[i] = -1
	}
	if err := Exscan(c, vals(r, m), eout, Sum); err != nil {
		return err
	}
	dex := make([]int64, m)
	if err := Exscan(c, digits(r, m), dex, concat); err != nil {
		return err
	}
	for i := 0; i < m; i++ {
		if sout[i] != sumRef(0, r+1, i) || dsc[i] != concatRef(0, r+1, i) {
			return fmt.Errorf("Scan element %d: %v %v, want %v %v", i, sout[i], dsc[i], sumRef(0, r+1, i), concatRef(0, r+1, i))
		}
		if r == 0 && eout[i] != -1 {
			return fmt.Errorf("Exscan changed rank 0's buffer")
		}
		if r > 0 && (eout[i] != sumRef(0, r, i) || dex[i] != concatRef(0, r, i)) {
			return fmt.Errorf("Exscan element %d: %v %v, want %v %v", i, eout[i], dex[i], sumRef(0, r, i), concatRef(0, r, i))
		}
	}
	return nil
}

// TestCollectivesOtherTransports runs the same checks over two-sided
// rendezvous with a small transport message size, and over the lossy
// datagram fabric (10% loss), for a couple of rank counts.
// TestCollectivesHierarchical runs every collective on ranks spread over
// hosts in uneven, interleaved layouts, so that the two-level algorithms
// (within each host, then between hosts) run with hosts of one and of
// several ranks, leaders that are not rank 0, and roots that are not
// leaders.
func TestCollectivesHierarchical(t *testing.T) {
	for _, hosts := range []string{"aab", "abab", "aabbb", "abcabca", "aaabbbbcc", "abcdefgaa"} {
		t.Run(hosts, func(t *testing.T) {
			t.Parallel()
			n := len(hosts)
			opt := &Options{Hosts: strings.Split(hosts, "")}
			runRanks(t, n, memtransport.Options{}, opt, func(c *Comm) error {
				if !c.useHier(kBarrier) {
					return fmt.Errorf("layout %q: collectives are not hierarchical", hosts)
				}
				for _, size := range collSizes {
					if err := collAll(c, size); err != nil {
						return fmt.Errorf("size %d: %w", size, err)
					}
				}
				// A split communicator keeps the layout of its ranks.
				sub, err := c.Split(c.Rank()%2, -c.Rank())
				if err != nil {
					return err
				}
				if err := collAll(sub, 67); err != nil {
					return fmt.Errorf("split: %w", err)
				}
				return sub.Free()
			})
		})
	}
}

func TestHostsOption(t *testing.T) {
	f := memtransport.New(2, memtransport.Options{})
	defer f.Close()
	_, err := NewWorld(f.Endpoint(0), &Options{Hosts: []string{"a"}})
	if err == nil || !strings.Contains(err.Error(), "names 1 hosts for 2 ranks") {
		t.Fatalf("NewWorld with a short host list: %v", err)
	}
}

func TestCollectivesOtherTransports(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		mopt memtransport.Options
	}{
		{"twosided", 6, memtransport.Options{NoOneSided: true, MaxMsg: 700}},
		{"lossy 10%", 5, memtransport.Options{Lossy: true, Loss: 0.10, Dup: 0.05, Reorder: 0.10, Seed: 3, MTU: 512}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runRanks(t, tc.n, tc.mopt, &Options{EagerLimit: 128}, func(c *Comm) error {
				for _, size := range []int{0, 5, 67} {
					if err := collAll(c, size); err != nil {
						return fmt.Errorf("size %d: %w", size, err)
					}
				}
				return nil
			})
		})
	}
}

// TestPredefinedOps checks every predefined reduction on several types
// against a sequential reference.
func TestPredefinedOps(t *testing.T) {
	run(t, 5, func(c *Comm) error {
		n, r := c.Size(), c.Rank()
		ints := func(r int) []int32 { return []int32{int32(r + 1), int32(-r), int32(r % 2), 0x0f0 >> r, 7} }
		type tc struct {
			op   Op
			want func(a, b int32) int32
		}
		b2i := func(v bool) int32 {
			if v {
				return 1
			}
			return 0
		}
		cases := []tc{
			{Sum, func(a, b int32) int32 { return a + b }},
			{Prod, func(a, b int32) int32 { return a * b }},
			{Min, func(a, b int32) int32 { return min(a, b) }},
			{Max, func(a, b int32) int32 { return max(a, b) }},
			{LAnd, func(a, b int32) int32 { return b2i(a != 0 && b != 0) }},
			{LOr, func(a, b int32) int32 { return b2i(a != 0 || b != 0) }},
			{LXor, func(a, b int32) int32 { return b2i((a != 0) != (b != 0)) }},
			{BAnd, func(a, b int32) int32 { return a & b }},
			{BOr, func(a, b int32) int32 { return a | b }},
			{BXor, func(a, b int32) int32 { return a ^ b }},
		}
		for _, k := range cases {
			out := make([]int32, 5)
			if err := Allreduce(c, ints(r), out, k.op); err != nil {
				return err
			}
			want := ints(0)
			for q := 1; q < n; q++ {
				for i, v := range ints(q) {
					want[i] = k.want(want[i], v)
				}
			}
			if !slices.Equal(out, want) {
				return fmt.Errorf("%v: %v, want %v", k.op, out, want)
			}
		}
		// Floats, unsigned and complex.
		f := []float32{float32(r) - 2.5}
		if err := Allreduce(c, f, f, Min); err != nil || f[0] != -2.5 {
			return fmt.Errorf("float32 Min %v %v", f, err)
		}
		u := []uint8{uint8(200 + r)}
		if err := Allreduce(c, u, u, Max); err != nil || u[0] != uint8(200+n-1) {
			return fmt.Errorf("uint8 Max %v %v", u, err)
		}
		z := []complex128{complex(float64(r), 1)}
		if err := Allreduce(c, z, z, Sum); err != nil || z[0] != complex(float64(n*(n-1)/2), float64(n)) {
			return fmt.Errorf("complex Sum %v %v", z, err)
		}
		type myInt int16
		mi := []myInt{myInt(r)}
		if err := Allreduce(c, mi, mi, Sum); err != nil || mi[0] != myInt(n*(n-1)/2) {
			return fmt.Errorf("defined type Sum %v %v", mi, err)
		}
		// MinLoc/MaxLoc: value and the rank it came from; ties go to the
		// lower index.
		locs := []Loc[float64]{{Val: float64(r % 3), Idx: r}, {Val: -float64(r), Idx: r}}
		mn, mx := make([]Loc[float64], 2), make([]Loc[float64], 2)
		if err := Allreduce(c, locs, mn, MinLoc); err != nil {
			return err
		}
		if err := Allreduce(c, locs, mx, MaxLoc); err != nil {
			return err
		}
		if mn[0] != (Loc[float64]{0, 0}) || mn[1] != (Loc[float64]{-float64(n - 1), n - 1}) ||
			mx[0] != (Loc[float64]{2, 2}) || mx[1] != (Loc[float64]{0, 0}) {
			return fmt.Errorf("MinLoc %v MaxLoc %v", mn, mx)
		}
		il := []Loc[int32]{{Val: int32(r * 7 % 5), Idx: r}}
		if err := Allreduce(c, il, il, MaxLoc); err != nil || il[0] != (Loc[int32]{4, 2}) {
			return fmt.Errorf("int32 MaxLoc %v %v", il, err)
		}
		if err := Allreduce(c, locs, mn, Sum); !errors.Is(err, ErrOp) {
			return fmt.Errorf("Sum on Loc: %v", err)
		}
		if err := Allreduce(c, []complex64{1}, []complex64{1}, Max); !errors.Is(err, ErrOp) {
			return fmt.Errorf("Max on complex: %v", err)
		}
		return nil
	})
}

// TestDeterministic checks that reductions of random floating-point data
// give bit-identical results on every rank and in every run, for every
// algorithm (MPI's "same result for the same rank count" advice, which
// jiarun guarantees).
func TestDeterministic(t *testing.T) {
	for _, n := range []int{3, 5, 6, 8} {
		t.Run(fmt.Sprint(n, "ranks"), func(t *testing.T) {
			const m = 1000
			input := func(r int) []float64 {
				rng := rand.New(rand.NewPCG(uint64(r), 3))
				v := make([]float64, m)
				for i := range v {
					v[i] = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(12)-6))
				}
				return v
			}
			results := make([][][]float64, n) // rank → algorithm → result
			for pass := 0; pass < 2; pass++ {
				run(t, n, func(c *Comm) error {
					var res [][]float64
					for _, a := range collAlgs[kAllreduce] {
						c.tune.force[kAllreduce] = a
						out := make([]float64, m)
						if err := Allreduce(c, input(c.Rank()), out, Sum); err != nil {
							return err
						}
						res = append(res, out)
					}
					c.tune.force[kAllreduce] = algRabenseifner
					red := make([]float64, m)
					if err := Reduce(c, input(c.Rank()), red, Sum, 0); err != nil {
						return err
					}
					res = append(res, red)
					if pass == 0 {
						results[c.Rank()] = res
						return nil
					}
					for i := range res {
						if c.Rank() != 0 && i == len(res)-1 {
							continue
						}
						for k := range res[i] {
							if math.Float64bits(res[i][k]) != math.Float64bits(results[c.Rank()][i][k]) {
								return fmt.Errorf("algorithm %d element %d differs between runs", i, k)
							}
							if i < len(res)-1 && math.Float64bits(res[i][k]) != math.Float64bits(results[0][i][k]) {
								return fmt.Errorf("algorithm %d element %d differs between ranks", i, k)
							}
						}
					}
					return nil
				})
			}
		})
	}
}

// TestLargeCollectives runs the large-message algorithms at their natural
// sizes on a few rank counts.
func TestLargeCollectives(t *testing.T) {
	const m = 1 << 17 // 1 MiB of float64
	for _, n := range []int{3, 4} {
		t.Run(fmt.Sprint(n, "ranks"), func(t *testing.T) {
			run(t, n, func(c *Comm) error {
				r := c.Rank()
				b := mvals(r, m)
				if err := Bcast(c, b, 1); err != nil {
					return err
				}
				if err := eqf(b, mvals(1, m)); err != nil {
					return fmt.Errorf("Bcast: %w", err)
				}
				out := make([]float64, m)
				if err := Allreduce(c, vals(r, m), out, Sum); err != nil {
					return err
				}
				for i := 0; i < m; i += 997 {
					if out[i] != sumRef(0, n, i) {
						return fmt.Errorf("Allreduce element %d: %v", i, out[i])
					}
				}
				if err := Reduce(c, vals(r, m), out, Sum, n-1); err != nil {
					return err
				}
				if r == n-1 {
					for i := 0; i < m; i += 991 {
						if out[i] != sumRef(0, n, i) {
							return fmt.Errorf("Reduce element %d: %v", i, out[i])
						}
					}
				}
				send := mvals(r, m)
				recv := make([]float64, m)
				if err := Alltoall(c, send[:m/n*n], recv[:m/n*n]); err != nil {
					return err
				}
				bs := m / n
				for q := 0; q < n; q++ {
					if err := eqf(recv[q*bs:(q+1)*bs], mvals(q, m)[r*bs:(r+1)*bs]); err != nil {
						return fmt.Errorf("Alltoall block %d", q)
					}
				}
				return nil
			})
		})
	}
	t.Run("16 MiB", func(t *testing.T) {
		const m = 16 << 20 / 8
		run(t, 2, func(c *Comm) error {
			r := c.Rank()
			out := make([]float64, m)
			if err := Allreduce(c, vals(r, m), out, Sum); err != nil {
				return err
			}
			for i := 0; i < m; i += 9973 {
				if out[i] != sumRef(0, 2, i) {
					return fmt.Errorf("Allreduce element %d: %v", i, out[i])
				}
			}
			b := mvals(r, m)
			if err := Bcast(c, b, 0); err != nil {
				return err
			}
			if err := eqf(b, mvals(0, m)); err != nil {
				return fmt.Errorf("Bcast: %w", err)
			}
			if r == 0 {
				return Send(c, b, 1, 0)
			}
			got := make([]float64, m)
			if _, err := Recv(c, got, 0, 0); err != nil {
				return err
			}
			return eqf(got, b)
		})
	})
	t.Run("9 ranks scatter-ring Bcast", func(t *testing.T) {
		run(t, 9, func(c *Comm) error {
			b := mvals(c.Rank(), 200000)
			if err := Bcast(c, b, 4); err != nil {
				return err
			}
			return eqf(b, mvals(4, 200000))
		})
	})
}

// TestMismatchedArguments checks that a count mismatch that shows up in a
// message is reported as ErrCount.
func TestMismatchedArguments(t *testing.T) {
	run(t, 2, func(c *Comm) error {
		n := 10
		if c.Rank() == 1 {
			n = 5
		}
		err := Bcast(c, make([]int, n), 0)
		if c.Rank() == 0 {
			return err
		}
		return expectErr(err, ErrCount, "Bcast", "mismatched collective arguments")
	})
	runRanks(t, 2, memtransport.Options{}, nil, func(c *Comm) error {
		n := 10
		if c.Rank() == 1 {
			n = 20
		}
		err := Allgather(c, make([]float64, n), make([]float64, 2*n))
		return expectErr(err, ErrCount, "Allgather")
	})
}

// TestSumKernels checks the predefined Sum kernels (vector ones where the
// platform has them) against the element-wise loop, for lengths around
// the vector block and offsets that leave the slices unaligned.
func TestSumKernels(t *testing.T) {
	check := func(t *testing.T, k kind, es int, ref func(in, inout []byte)) {
		fn := predef[opSum][k]
		for _, n := range []int{0, 1, 3, 7, 8, 15, 16, 17, 31, 63, 64, 65, 1000} {
			for _, skew := range []int{0, es} {
				in, got, want := make([]byte, n*es+skew), make([]byte, n*es+skew), make([]byte, n*es+skew)
				for i := range in {
					in[i], got[i] = byte(i*37+n), byte(i*11+3)
				}
				copy(want, got)
				fn(in[skew:], got[skew:])
				ref(in[skew:], want[skew:])
				if !bytes.Equal(got, want) {
					t.Fatalf("kind %d, %d elements, skew %d: got %v, want %v", k, n, skew, got, want)
				}
			}
		}
	}
	check(t, kFloat32, 4, opSumT[float32])
	check(t, kFloat64, 8, opSumT[float64])
	check(t, kInt32, 4, opSumT[int32])
	check(t, kUint32, 4, opSumT[uint32])
	check(t, kInt64, 8, opSumT[int64])
	check(t, kUint64, 8, opSumT[uint64])
}
