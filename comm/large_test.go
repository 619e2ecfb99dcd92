package comm

import (
	"fmt"
	"testing"

	"github.com/jiarun/jia/comm/proto"
)

// forTransports runs fn over the in-memory transport and over qtransport
// (shm devices of this process).
func forTransports(t *testing.T, fn func(t *testing.T)) {
	for _, kind := range []string{"mem", "q"} {
		t.Run(kind, func(t *testing.T) { withTransport(kind, func() { fn(t) }) })
	}
}

// pattern returns n distinct values for message id.
func pattern(id, n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = float64(id<<24 + i)
	}
	return s
}

// TestVectorLarge sends vectors far beyond the eager limit, with blocks
// from 8 bytes to 4 KiB, gathered and packed, into vectors of another
// stride and into contiguous buffers, and checks every element.
func TestVectorLarge(t *testing.T) {
	forTransports(t, func(t *testing.T) {
		for _, bl := range []int{1, 8, 512} { // float64s per block
			for _, pack := range []bool{false, true} {
				t.Run(fmt.Sprintf("block%dB/pack=%v", 8*bl, pack), func(t *testing.T) {
					count := max(64, (256<<10)/(8*bl)) // 256 KiB messages or more
					copt := Options{EagerLimit: 1024, PackVectors: pack}
					for _, cf := range configs[:3] {
						runRanks(t, 2, cf.mopt, &copt, func(c *Comm) error {
							return vectorExchange(c, count, bl)
						})
					}
				})
			}
		}
	})
}

// vectorExchange: rank 0 sends a vector (stride 2·bl) to a vector of
// stride 3·bl, the same vector to a contiguous buffer, and a contiguous
// message into a vector; two of them outstanding at once.
func vectorExchange(c *Comm, count, bl int) error {
	n := count * bl
	if c.Rank() == 0 {
		src := make([]float64, 2*n)
		p := pattern(1, n)
		for i := range count {
			copy(src[2*bl*i:2*bl*i+bl], p[bl*i:bl*i+bl])
		}
		v := Vector[float64]{Data: src, Count: count, BlockLen: bl, Stride: 2 * bl}
		q1, err := IsendVector(c, v, 1, 1)
		if err != nil {
			return err
		}
		q2, err := Isend(c, pattern(2, n), 1, 2)
		if err != nil {
			return err
		}
		if err := WaitAll([]Request{q1, q2}, nil); err != nil {
			return err
		}
		return SendVector(c, v, 1, 3)
	}
	dst := make([]float64, 3*n)
	dv := Vector[float64]{Data: dst, Count: count, BlockLen: bl, Stride: 3 * bl}
	dst2 := make([]float64, 2*n)
	dv2 := Vector[float64]{Data: dst2, Count: count, BlockLen: bl, Stride: 2 * bl}
	q1, err := IrecvVector(c, dv, 0, 1)
	if err != nil {
		return err
	}
	q2, err := IrecvVector(c, dv2, 0, 2)
	if err != nil {
		return err
	}
	sts := make([]Status, 2)
	if err := WaitAll([]Request{q1, q2}, sts); err != nil {
		return err
	}
	flat := make([]float64, n)
	st, err := Recv(c, flat, 0, 3)
	if err != nil {
		return err
	}
	if sts[0].Count != n || sts[1].Count != n || st.Count != n {
		return fmt.Errorf("counts %d, %d, %d, want %d", sts[0].Count, sts[1].Count, st.Count, n)
	}
	want1, want2 := pattern(1, n), pattern(2, n)
	for i := range count {
		for k := range bl {
			e := bl*i + k
			if got := dst[3*bl*i+k]; got != want1[e] {
				return fmt.Errorf("vector into vector: element %d = %v, want %v", e, got, want1[e])
			}
			if got := dst2[2*bl*i+k]; got != want2[e] {
				return fmt.Errorf("contiguous into vector: element %d = %v, want %v", e, got, want2[e])
			}
			if got := flat[e]; got != want1[e] {
				return fmt.Errorf("vector into contiguous: element %d = %v, want %v", e, got, want1[e])
			}
		}
		// The gaps between the blocks are untouched.
		for k := bl; k < 3*bl; k++ {
			if dst[3*bl*i+k] != 0 {
				return fmt.Errorf("vector into vector: gap element %d of block %d written", k, i)
			}
		}
		for k := bl; k < 2*bl; k++ {
			if dst2[2*bl*i+k] != 0 {
				return fmt.Errorf("contiguous into vector: gap element %d of block %d written", k, i)
			}
		}
	}
	return nil
}

// TestManyLargeIsends keeps a window of large sends outstanding in both
// directions at once, each with its own contents and buffer, as the
// bandwidth benchmarks do, and checks that every message lands intact in
// its own receive.
func TestManyLargeIsends(t *testing.T) {
	forTransports(t, func(t *testing.T) {
		for _, split := range []int{0, 64 << 10} {
			for _, size := range []int{16 << 10, 300 << 10} {
				t.Run(fmt.Sprintf("split%d/%dKiB", split, size>>10), func(t *testing.T) {
					manyLargeIsends(t, size, split)
				})
			}
		}
	})
}

// manyLargeIsends runs two rounds of a window of 8 Isends and Irecvs of
// size bytes in both directions (Options.SplitMin split).
func manyLargeIsends(t *testing.T, size, split int) {
	const window = 8
	n := size / 8
	runRanks(t, 2, configs[0].mopt, &Options{SplitMin: split}, func(c *Comm) error {
		peer := 1 - c.Rank()
		rbufs := make([][]float64, window)
		reqs := make([]Request, 0, 2*window)
		for round := range 2 {
			for j := range rbufs {
				rbufs[j] = make([]float64, n)
				q, err := Irecv(c, rbufs[j], peer, j)
				if err != nil {
					return err
				}
				reqs = append(reqs, q)
			}
			for j := range window {
				q, err := Isend(c, pattern(c.Rank()<<12|round<<8|j, n), peer, j)
				if err != nil {
					return err
				}
				reqs = append(reqs, q)
			}
			if err := WaitAll(reqs, nil); err != nil {
				return err
			}
			reqs = reqs[:0]
			for j, b := range rbufs {
				want := pattern(peer<<12|round<<8|j, n)
				for i := range b {
					if b[i] != want[i] {
						return fmt.Errorf("round %d message %d: element %d = %v, want %v", round, j, i, b[i], want[i])
					}
				}
			}
		}
		return nil
	})
}

// TestAllreduceLargeOutOfPlace checks large Allreduces with separate send
// and receive buffers (the first step sends from send) against in-place
// ones and the exact sums, and that send is left untouched.
func TestAllreduceLargeOutOfPlace(t *testing.T) {
	forTransports(t, func(t *testing.T) {
		// 1 MiB: Rabenseifner on 2 and 4 ranks, the ring on 3 and 5.
		for _, n := range []int{2, 3, 4, 5} {
			for _, count := range []int{1 << 18, 1<<16 + 3} {
				t.Run(fmt.Sprintf("%dranks/%d", n, count), func(t *testing.T) {
					runRanks(t, n, configs[0].mopt, nil, func(c *Comm) error {
						send := make([]float32, count)
						for i := range send {
							send[i] = float32((c.Rank()+1)*(i%1000) + i%7)
						}
						keep := append([]float32(nil), send...)
						recv := make([]float32, count)
						if err := Allreduce(c, send, recv, Sum); err != nil {
							return err
						}
						in := append([]float32(nil), send...)
						if err := Allreduce(c, in, in, Sum); err != nil {
							return err
						}
						tot := float32(n * (n + 1) / 2)
						for i := range recv {
							want := tot*float32(i%1000) + float32(n*(i%7))
							if recv[i] != want || in[i] != recv[i] || send[i] != keep[i] {
								return fmt.Errorf("element %d: out of place %v, in place %v, want %v (send %v, was %v)",
									i, recv[i], in[i], want, send[i], keep[i])
							}
						}
						return nil
					})
				})
			}
		}
	})
}

// TestDataPayload: a DATA message of a two-sided rendezvous, header
// included, fills a power-of-two buffer no larger than the transport's
// largest message, and at least half of it (a backlogged message is kept
// in a pooled buffer of a power-of-two class).
func TestDataPayload(t *testing.T) {
	for _, m := range []int{4 << 10, 16<<10 + 64, 64<<10 + 1, 1 << 20, 3 << 20} {
		n := dataPayload(m) + proto.DataHeader
		if n&(n-1) != 0 || n > m || 2*n <= m {
			t.Errorf("largest message %d: DATA of %d bytes with its header, want the largest power of two ≤ %d", m, n, m)
		}
	}
	if got := dataPayload(40); got != 40-proto.DataHeader {
		t.Errorf("largest message 40: payload %d, want %d", got, 40-proto.DataHeader)
	}
}

// TestDataPaced: with two-sided rendezvous, a window of large sends whose
// receives are all posted sends its DATA messages as the transport's
// backlog to the receiver empties, not all at once into that backlog (one
// CTS answered 32 DATA messages of 16 KiB for each 512 KiB send). The
// bytes arrive intact and every send completes.
func TestDataPaced(t *testing.T) {
	const size, window = 512 << 10, 16
	trs := qranks(t, 2)
	onQRanks(t, trs, &Options{TwoSided: true}, func(c *Comm) error {
		bufs := make([][]byte, window)
		reqs := make([]Request, window)
		for i := range bufs {
			bufs[i] = make([]byte, size)
			if c.Rank() == 0 {
				for k := range bufs[i] {
					bufs[i][k] = byte(i + k/4096)
				}
				continue
			}
			var err error
			if reqs[i], err = Irecv(c, bufs[i], 0, i); err != nil {
				return err
			}
		}
		// Every receive is posted: each send's RTS is answered at once.
		if err := c.Barrier(); err != nil {
			return err
		}
		if c.Rank() == 0 {
			for i := range bufs {
				var err error
				if reqs[i], err = Isend(c, bufs[i], 1, i); err != nil {
					return err
				}
			}
		}
		if err := WaitAll(reqs, nil); err != nil {
			return err
		}
		if c.Rank() == 1 {
			for i, b := range bufs {
				for k, v := range b {
					if v != byte(i+k/4096) {
						return fmt.Errorf("message %d: byte %d is %d, want %d", i, k, v, byte(i+k/4096))
					}
				}
			}
		}
		return nil
	})
	st := trs[0].Stats()
	t.Logf("sender: %d messages backlogged, at most %d at once", st.Backlogged, st.BacklogPeak)
	if st.BacklogPeak > 8 {
		t.Errorf("the sender's backlog held up to %d messages at once; want a few (DATA paced by the backlog)", st.BacklogPeak)
	}
}
