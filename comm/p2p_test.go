package comm

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jiarun/jia/comm/memtransport"
)

// configs are the transport and protocol settings point-to-point tests run
// under: one-sided rendezvous with a small eager limit (so small messages
// already take the rendezvous path), two-sided rendezvous with a small
// transport message size (DATA fragmentation), a transport that gathers
// at most 2 pieces (vectors get packed), and the defaults.
var configs = []struct {
	name string
	mopt memtransport.Options
	copt *Options
}{
	{"read", memtransport.Options{}, &Options{EagerLimit: 64}},
	{"twosided", memtransport.Options{NoOneSided: true, MaxMsg: 200}, &Options{EagerLimit: 64}},
	{"maxsge", memtransport.Options{MaxSGE: 2, MaxRead: 100}, &Options{EagerLimit: 64}},
	{"default", memtransport.Options{}, nil},
}

func forConfigs(t *testing.T, n int, fn func(c *Comm) error) {
	for _, cf := range configs {
		t.Run(cf.name, func(t *testing.T) { runRanks(t, n, cf.mopt, cf.copt, fn) })
	}
}

func seq(n, start int) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = int32(start + i)
	}
	return s
}

func expectErr(err error, class error, words ...string) error {
	if !errors.Is(err, class) {
		return fmt.Errorf("got error %v, want %v", err, class)
	}
	var ce *Error
	if !errors.As(err, &ce) {
		return fmt.Errorf("error %v is not a *comm.Error", err)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			return fmt.Errorf("error %q does not mention %q", err, w)
		}
	}
	return nil
}

// The tests are named after the rule of the MPI standard (MPI-4.0) they
// check.

func TestNonOvertaking(t *testing.T) {
	t.Run("MPI-4.0 §3.5 non-overtaking: messages of one sender match in send order, eager and rendezvous mixed", func(t *testing.T) {
		sizes := []int{1, 300, 2, 5000, 0, 70, 3}
		forConfigs(t, 2, func(c *Comm) error {
			if c.Rank() == 0 {
				var reqs []Request
				for i, n := range sizes {
					r, err := Isend(c, seq(n, 1000*i), 1, 7)
					if err != nil {
						return err
					}
					reqs = append(reqs, r)
				}
				return WaitAll(reqs, nil)
			}
			for i, n := range sizes {
				buf := make([]int32, 5000)
				st, err := Recv(c, buf, AnySource, AnyTag)
				if err != nil {
					return err
				}
				if st.Count != n || (n > 0 && buf[0] != int32(1000*i)) || st.Source != 0 || st.Tag != 7 {
					return fmt.Errorf("message %d: status %+v first %d", i, st, buf[0])
				}
			}
			return nil
		})
	})
	t.Run("MPI-4.0 §3.5 non-overtaking with AnyTag: a tag-specific receive may take a later message, wildcards take the earliest", func(t *testing.T) {
		forConfigs(t, 2, func(c *Comm) error {
			if c.Rank() == 0 {
				var reqs []Request
				for i, tag := range []int{1, 2, 1, 3} {
					r, err := Isend(c, seq(100, i), 1, tag)
					if err != nil {
						return err
					}
					reqs = append(reqs, r)
				}
				return WaitAll(reqs, nil)
			}
			buf := make([]int32, 100)
			want := []struct{ tag, first int }{{2, 1}, {AnyTag, 0}, {AnyTag, 2}, {3, 3}}
			// Wait until all four are there, so that the order of matching
			// is what is tested.
			for {
				st, ok, err := c.Iprobe(0, 3)
				if err != nil {
					return err
				}
				if ok && st.Tag == 3 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			for _, w := range want {
				if _, err := Recv(c, buf, 0, w.tag); err != nil {
					return err
				}
				if buf[0] != int32(w.first) {
					return fmt.Errorf("receive with tag %d got message %d, want %d", w.tag, buf[0], w.first)
				}
			}
			return nil
		})
	})
	t.Run("MPI-4.0 §3.5 non-overtaking: receives posted in order match in order", func(t *testing.T) {
		forConfigs(t, 2, func(c *Comm) error {
			const k = 6
			if c.Rank() == 1 {
				var reqs []Request
				bufs := make([][]int32, k)
				for i := range bufs {
					bufs[i] = make([]int32, 200)
					src, tag := 0, AnyTag
					if i%2 == 0 {
						src = AnySource
					}
					r, err := Irecv(c, bufs[i], src, tag)
					if err != nil {
						return err
					}
					reqs = append(reqs, r)
				}
				if err := c.Barrier(); err != nil {
					return err
				}
				sts := make([]Status, k)
				if err := WaitAll(reqs, sts); err != nil {
					return err
				}
				for i := range bufs {
					if bufs[i][0] != int32(i) || sts[i].Count != 50*(i%3)+1 {
						return fmt.Errorf("receive %d got message %d (%+v)", i, bufs[i][0], sts[i])
					}
				}
				return nil
			}
			if err := c.Barrier(); err != nil {
				return err
			}
			for i := 0; i < k; i++ {
				if err := Send(c, seq(50*(i%3)+1, i), 1, i); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

func TestStatusAndWildcards(t *testing.T) {
	t.Run("MPI-4.0 §3.2.5 status: source, tag and count of a receive from AnySource", func(t *testing.T) {
		forConfigs(t, 5, func(c *Comm) error {
			if c.Rank() != 0 {
				return Send(c, make([]float64, 10*c.Rank()), 0, 100+c.Rank())
			}
			seen := map[int]bool{}
			for i := 1; i < c.Size(); i++ {
				st, err := Recv(c, make([]float64, 100), AnySource, AnyTag)
				if err != nil {
					return err
				}
				if st.Tag != 100+st.Source || st.Count != 10*st.Source || st.Bytes != 80*st.Source || seen[st.Source] {
					return fmt.Errorf("status %+v", st)
				}
				seen[st.Source] = true
			}
			return nil
		})
	})
	t.Run("MPI-4.0 §3.8.1 probe: a receive with the probed envelope gets the probed message", func(t *testing.T) {
		forConfigs(t, 3, func(c *Comm) error {
			if c.Rank() != 0 {
				return Send(c, seq(37*c.Rank(), c.Rank()), 0, c.Rank())
			}
			if _, ok, err := c.Iprobe(AnySource, 99); ok || err != nil {
				return fmt.Errorf("Iprobe for nothing: %v %v", ok, err)
			}
			for i := 0; i < 2; i++ {
				st, err := c.Probe(AnySource, AnyTag)
				if err != nil {
					return err
				}
				n := CountOf[int32](st)
				buf := make([]int32, n)
				st2, err := Recv(c, buf, st.Source, st.Tag)
				if err != nil {
					return err
				}
				if st2.Source != st.Source || n != 37*st.Source || buf[0] != int32(st.Source) {
					return fmt.Errorf("probed %+v, received %+v", st, st2)
				}
			}
			return nil
		})
	})
}

func TestTruncation(t *testing.T) {
	for _, n := range []int{20, 3000} {
		t.Run(fmt.Sprintf("MPI-4.0 §3.2.4 overflow: a %d-element message into a smaller buffer fails with ErrTruncate", n), func(t *testing.T) {
			forConfigs(t, 2, func(c *Comm) error {
				if c.Rank() == 0 {
					if err := Send(c, seq(n, 1), 1, 3); err != nil {
						return err
					}
					return Send(c, seq(n, 1), 1, 4) // the next message is unaffected
				}
				buf := make([]int32, n/2)
				st, err := Recv(c, buf, 0, 3)
				if e := expectErr(err, ErrTruncate, "Recv", "world", "rank 0", "tag 3", "truncated"); e != nil {
					return e
				}
				if st.Count != n/2 || buf[0] != 1 || buf[n/2-1] != int32(n/2) {
					return fmt.Errorf("status %+v, data %d…%d", st, buf[0], buf[n/2-1])
				}
				full := make([]int32, n)
				if _, err := Recv(c, full, 0, 4); err != nil || full[n-1] != int32(n) {
					return fmt.Errorf("next message: %v", err)
				}
				return nil
			})
		})
	}
}

func TestArgumentErrors(t *testing.T) {
	run(t, 2, func(c *Comm) error {
		b := make([]int, 1)
		checks := []struct {
			err   error
			class error
			words []string
		}{
			{Send(c, b, 2, 0), ErrRank, []string{"Send", "world", "rank 2"}},
			{Send(c, b, -5, 0), ErrRank, []string{"rank -5"}},
			{Send(c, b, AnySource, 0), ErrRank, nil},
			{Send(c, b, 0, -3), ErrTag, []string{"tag -3"}},
			{Send(c, b, 0, AnyTag), ErrTag, nil},
			{func() error { _, err := Recv(c, b, 7, 0); return err }(), ErrRank, []string{"Recv", "rank 7"}},
			{func() error { _, err := Recv(c, b, 0, -2); return err }(), ErrTag, []string{"tag -2"}},
			{func() error { _, err := c.Probe(3, 0); return err }(), ErrRank, nil},
			{func() error { _, err := Isend(c, b, 1, TagUB+1); return err }(), ErrTag, nil},
			{SendVector(c, Vector[int]{Data: b, Count: 2, BlockLen: 1, Stride: 1}, 1, 0), ErrBuffer, nil},
			{SendVector(c, Vector[int]{Data: b, Count: 2, BlockLen: 2, Stride: 1}, 1, 0), ErrBuffer, nil},
			{Bcast(c, b, 5), ErrRoot, []string{"Bcast"}},
			{Allreduce(c, []float64{1}, []float64{1}, BAnd), ErrOp, []string{"BAnd", "float64"}},
			{Allreduce(c, []float64{1}, []float64{1, 2}, Sum), ErrCount, nil},
			{Allreduce(c, []int{1}, []int{1}, NewOp("f", true, func(in, inout []float64) {})), ErrOp, []string{"float64"}},
			{c.Free(), ErrComm, []string{"world"}},
		}
		for i, ch := range checks {
			if e := expectErr(ch.err, ch.class, ch.words...); e != nil {
				return fmt.Errorf("check %d: %v", i, e)
			}
		}
		return nil
	})
}

func TestProcNull(t *testing.T) {
	run(t, 2, func(c *Comm) error {
		if err := Send(c, []int{1}, ProcNull, 0); err != nil {
			return err
		}
		st, err := Recv(c, make([]int, 3), ProcNull, 5)
		if err != nil || st.Source != ProcNull || st.Tag != AnyTag || st.Count != 0 {
			return fmt.Errorf("%+v %v", st, err)
		}
		// A shift with ProcNull at the ends (non-periodic).
		left, right := c.Rank()-1, c.Rank()+1
		if left < 0 {
			left = ProcNull
		}
		if right >= c.Size() {
			right = ProcNull
		}
		got := []int{-1}
		if _, err := Sendrecv(c, []int{c.Rank()}, right, 0, got, left, 0); err != nil {
			return err
		}
		if want := c.Rank() - 1; (c.Rank() > 0 && got[0] != want) || (c.Rank() == 0 && got[0] != -1) {
			return fmt.Errorf("got %d", got[0])
		}
		return nil
	})
}

func TestSendrecvRing(t *testing.T) {
	t.Run("MPI-4.0 §3.10 Sendrecv: a ring shift of large messages does not deadlock", func(t *testing.T) {
		forConfigs(t, 5, func(c *Comm) error {
			n, r := c.Size(), c.Rank()
			out := seq(20000, r)
			in := make([]int32, 20000)
			st, err := Sendrecv(c, out, (r+1)%n, 1, in, (r-1+n)%n, 1)
			if err != nil {
				return err
			}
			if in[0] != int32((r-1+n)%n) || st.Source != (r-1+n)%n || st.Count != 20000 {
				return fmt.Errorf("got %d, status %+v", in[0], st)
			}
			return nil
		})
	})
}

func TestCompletionCalls(t *testing.T) {
	t.Run("MPI-4.0 §3.7.5 WaitAny, TestAll and inactive requests", func(t *testing.T) {
		forConfigs(t, 3, func(c *Comm) error {
			if c.Rank() != 0 {
				if err := c.Barrier(); err != nil {
					return err
				}
				return Send(c, seq(500, c.Rank()), 0, 0)
			}
			bufs := [][]int32{make([]int32, 500), make([]int32, 500)}
			reqs := make([]Request, 3) // reqs[2] stays inactive
			for i := 0; i < 2; i++ {
				var err error
				if reqs[i], err = Irecv(c, bufs[i], i+1, 0); err != nil {
					return err
				}
			}
			if done, err := TestAll(reqs, nil); done || err != nil {
				return fmt.Errorf("TestAll before the sends: %v %v", done, err)
			}
			if err := c.Barrier(); err != nil {
				return err
			}
			seen := 0
			for k := 0; k < 2; k++ {
				i, st, err := WaitAny(reqs)
				if err != nil {
					return err
				}
				if i < 0 || i > 1 || st.Source != i+1 || bufs[i][0] != int32(i+1) || reqs[i].Active() {
					return fmt.Errorf("WaitAny: %d %+v", i, st)
				}
				seen |= 1 << i
			}
			if i, _, _ := WaitAny(reqs); i != -1 || seen != 3 {
				return fmt.Errorf("WaitAny on inactive requests: %d", i)
			}
			if done, err := TestAll(reqs, nil); !done || err != nil {
				return fmt.Errorf("TestAll on inactive requests: %v %v", done, err)
			}
			return nil
		})
	})
	t.Run("MPI-4.0 §3.7.3 a request handle is inactive once completion was reported", func(t *testing.T) {
		run(t, 1, func(c *Comm) error {
			r, err := Isend(c, []int{1}, 0, 0)
			if err != nil {
				return err
			}
			if _, err := r.Wait(); err != nil {
				return err
			}
			st, err := r.Wait() // inactive: empty status
			if err != nil || st.Source != AnySource || r.Active() {
				return fmt.Errorf("second Wait: %+v %v", st, err)
			}
			x := []int{0}
			q, _ := Irecv(c, x, 0, 0)
			for {
				_, done, err := q.Test()
				if err != nil {
					return err
				}
				if done {
					break
				}
			}
			if x[0] != 1 || q.Active() {
				return fmt.Errorf("got %d", x[0])
			}
			return nil
		})
	})
	t.Run("MPI-4.0 §3.8.4 cancel: a canceled receive completes with ErrCanceled", func(t *testing.T) {
		run(t, 2, func(c *Comm) error {
			x := []int{0}
			r, err := Irecv(c, x, AnySource, 42)
			if err != nil {
				return err
			}
			if !r.Cancel() {
				return fmt.Errorf("cancel failed")
			}
			_, err = r.Wait()
			return expectErr(err, ErrCanceled)
		})
	})
}

func TestCommunicators(t *testing.T) {
	t.Run("MPI-4.0 §7.4.2 Dup: traffic on the duplicate never matches receives on the parent", func(t *testing.T) {
		run(t, 2, func(c *Comm) error {
			d, err := c.Dup()
			if err != nil {
				return err
			}
			if d.Rank() != c.Rank() || d.Size() != c.Size() || d.Name() != "world/dup" {
				return fmt.Errorf("dup %v", d)
			}
			if c.Rank() == 0 {
				if err := Send(d, []int{1}, 1, 0); err != nil {
					return err
				}
				return Send(c, []int{2}, 1, 0)
			}
			x := []int{0}
			if _, err := Recv(c, x, AnySource, AnyTag); err != nil || x[0] != 2 {
				return fmt.Errorf("world receive got %d (%v)", x[0], err)
			}
			if _, err := Recv(d, x, AnySource, AnyTag); err != nil || x[0] != 1 {
				return fmt.Errorf("dup receive got %d (%v)", x[0], err)
			}
			return nil
		})
	})
	t.Run("MPI-4.0 §7.4.2 Split: groups by color, ordered by key then rank, with contexts of their own", func(t *testing.T) {
		run(t, 7, func(c *Comm) error {
			r := c.Rank()
			color := r % 3
			if r == 6 {
				color = Undefined
			}
			s, err := c.Split(color, -r) // reverse order within a color
			if err != nil {
				return err
			}
			if r == 6 {
				if s != nil {
					return fmt.Errorf("Undefined color got %v", s)
				}
				return nil
			}
			var members []int
			for q := 0; q < 6; q++ {
				if q%3 == color {
					members = append([]int{q}, members...)
				}
			}
			if s.Size() != len(members) || members[s.Rank()] != r {
				return fmt.Errorf("split: rank %d of %d, members %v", s.Rank(), s.Size(), members)
			}
			for i, m := range members {
				if s.WorldRank(i) != m {
					return fmt.Errorf("WorldRank(%d) = %d, want %d", i, s.WorldRank(i), m)
				}
			}
			// Point-to-point and collectives within the new communicator.
			sum := []int{0}
			if err := Allreduce(s, []int{r}, sum, Sum); err != nil {
				return err
			}
			want := 0
			for _, m := range members {
				want += m
			}
			if sum[0] != want {
				return fmt.Errorf("sum %d, want %d", sum[0], want)
			}
			next, prev := (s.Rank()+1)%s.Size(), (s.Rank()-1+s.Size())%s.Size()
			got := []int{-1}
			st, err := Sendrecv(s, []int{r}, next, 5, got, prev, 5)
			if err != nil {
				return err
			}
			if got[0] != members[prev] || st.Source != prev {
				return fmt.Errorf("ring in split got %d from %d", got[0], st.Source)
			}
			// Nested split and dup get fresh contexts on every member.
			d, err := s.Dup()
			if err != nil {
				return err
			}
			if err := d.Barrier(); err != nil {
				return err
			}
			return errors.Join(d.Free(), s.Free())
		})
	})
	t.Run("MPI-4.0 §7.4.3 Free: calls on a freed communicator fail", func(t *testing.T) {
		run(t, 2, func(c *Comm) error {
			d, err := c.Dup()
			if err != nil {
				return err
			}
			if err := d.Free(); err != nil {
				return err
			}
			errs := []error{
				Send(d, []int{1}, 0, 0),
				func() error { _, err := Recv(d, []int{1}, 0, 0); return err }(),
				d.Barrier(),
				Allreduce(d, []int{1}, []int{1}, Sum),
				d.Free(),
				func() error { _, err := d.Dup(); return err }(),
			}
			for i, err := range errs {
				if e := expectErr(err, ErrCommFreed, "world/dup"); e != nil {
					return fmt.Errorf("call %d: %v", i, e)
				}
			}
			// Freed contexts are reused.
			for i := 0; i < maxContexts+10; i++ {
				d, err := c.Dup()
				if err != nil {
					return fmt.Errorf("dup %d: %v", i, err)
				}
				if err := d.Free(); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

func TestVector(t *testing.T) {
	// A 6×8 row-major matrix; columns and row blocks as vectors.
	const rows, cols = 6, 8
	mat := func(base int) []float64 {
		m := make([]float64, rows*cols)
		for i := range m {
			m[i] = float64(base + i)
		}
		return m
	}
	for _, big := range []bool{false, true} {
		name := "MPI-4.0 §5.1.2 vector: a strided column arrives in order into a strided column"
		scale := 1
		if big {
			name += ", rendezvous"
			scale = 300 // blocks of 300 elements: READs per block, or DATA
		}
		t.Run(name, func(t *testing.T) {
			for _, pack := range []bool{false, true} {
				for _, cf := range configs {
					copt := Options{EagerLimit: 64, PackVectors: pack}
					runRanks(t, 2, cf.mopt, &copt, func(c *Comm) error {
						if c.Rank() == 0 {
							m := mat(0)
							m = slices.Repeat(m, scale)
							// column 3: count=rows, block=scale, stride=cols*scale
							v := Vector[float64]{Data: m, Count: rows, BlockLen: scale, Stride: cols * scale}
							if err := SendVector(c, v, 1, 0); err != nil {
								return err
							}
							return Send(c, m[:rows*scale], 1, 1)
						}
						dst := make([]float64, rows*cols*scale)
						v := Vector[float64]{Data: dst[5*scale:], Count: rows, BlockLen: scale, Stride: cols * scale}
						st, err := RecvVector(c, v, 0, 0)
						if err != nil {
							return err
						}
						if st.Count != rows*scale {
							return fmt.Errorf("count %d", st.Count)
						}
						src := slices.Repeat(mat(0), scale)
						for i := 0; i < rows; i++ {
							for k := 0; k < scale; k++ {
								if got, want := dst[5*scale+i*cols*scale+k], src[i*cols*scale+k]; got != want {
									return fmt.Errorf("row %d elem %d: %v, want %v", i, k, got, want)
								}
							}
						}
						// A contiguous message into a vector.
						dst2 := make([]float64, 2*rows*scale)
						v2 := Vector[float64]{Data: dst2, Count: rows, BlockLen: scale, Stride: 2 * scale}
						if _, err := RecvVector(c, v2, 0, 1); err != nil {
							return err
						}
						for i := 0; i < rows; i++ {
							if dst2[2*i*scale] != src[i*scale] {
								return fmt.Errorf("contiguous into vector: block %d = %v", i, dst2[2*i*scale])
							}
						}
						return nil
					})
				}
			}
		})
	}
}

func TestSelfMessages(t *testing.T) {
	run(t, 1, func(c *Comm) error {
		big := seq(100000, 0)
		r, err := Isend(c, big, 0, 1)
		if err != nil {
			return err
		}
		got := make([]int32, 100000)
		if _, err := Recv(c, got, 0, 1); err != nil {
			return err
		}
		if _, err := r.Wait(); err != nil {
			return err
		}
		if !slices.Equal(got, big) {
			return fmt.Errorf("self message corrupted")
		}
		return nil
	})
}

// TestStress has every rank send many messages of random sizes (eager and
// rendezvous) and random tags to random ranks, all non-blocking; receivers
// take them with random mixes of wildcards. Each received message must
// carry the right data, and be the earliest not yet received message of its
// sender that the receive could match (non-overtaking).
func TestStress(t *testing.T) {
	cases := []struct {
		name      string
		n, msgs   int
		maxSize   int
		mopt      memtransport.Options
		copt      *Options
		bigChance int // one message in bigChance is large
	}{
		{"read", 8, 120, 300, memtransport.Options{}, &Options{EagerLimit: 256}, 10},
		{"twosided", 6, 80, 300, memtransport.Options{NoOneSided: true, MaxMsg: 1000}, &Options{EagerLimit: 256}, 10},
		{"lossy 10%", 5, 80, 300, memtransport.Options{Lossy: true, Loss: 0.10, Dup: 0.05, Reorder: 0.10, Seed: 1, MTU: 512, RTO: 2 * time.Millisecond},
			&Options{EagerLimit: 256}, 8},
		{"lossy 10% twosided", 4, 50, 300, memtransport.Options{Lossy: true, Loss: 0.10, Dup: 0.05, Reorder: 0.10, Seed: 2, MTU: 512, RTO: 2 * time.Millisecond, NoOneSided: true, MaxMsg: 2000},
			&Options{EagerLimit: 256}, 8},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stress(t, tc.n, tc.msgs, tc.maxSize, tc.bigChance, tc.mopt, tc.copt, 42)
		})
	}
}

type plannedMsg struct {
	src, dst, tag, size, seq int
}

func stress(t *testing.T, n, perRank, maxSize, bigChance int, mopt memtransport.Options, copt *Options, seed uint64) {
	// The plan is generated from the seed, identically on every rank.
	rng := rand.New(rand.NewPCG(seed, 5))
	var plan []plannedMsg
	for src := 0; src < n; src++ {
		for k := 0; k < perRank; k++ {
			size := rng.IntN(maxSize)
			if rng.IntN(bigChance) == 0 {
				size = 2000 + rng.IntN(20000)
			}
			plan = append(plan, plannedMsg{src, rng.IntN(n), rng.IntN(4), size, k})
		}
	}
	fill := func(m plannedMsg) []int32 {
		b := make([]int32, m.size+2)
		b[0], b[1] = int32(m.src), int32(m.seq)
		for i := 2; i < len(b); i++ {
			b[i] = int32(m.src*1000003 + m.seq*7919 + i)
		}
		return b
	}
	f := runRanks(t, n, mopt, copt, func(c *Comm) error {
		r := c.Rank()
		var reqs []Request
		for _, m := range plan {
			if m.src == r {
				q, err := Isend(c, fill(m), m.dst, m.tag)
				if err != nil {
					return err
				}
				reqs = append(reqs, q)
			}
		}
		var mine []plannedMsg // still to receive, in send order per sender
		for _, m := range plan {
			if m.dst == r {
				mine = append(mine, m)
			}
		}
		lr := rand.New(rand.NewPCG(seed, uint64(r)+100))
		buf := make([]int32, 22002)
		for len(mine) > 0 {
			pick := mine[lr.IntN(len(mine))]
			src, tag := pick.src, pick.tag
			if lr.IntN(2) == 0 {
				src = AnySource
			}
			if lr.IntN(2) == 0 {
				tag = AnyTag
			}
			st, err := Recv(c, buf, src, tag)
			if err != nil {
				return err
			}
			gs, gseq := int(buf[0]), int(buf[1])
			// The earliest remaining message of that sender matching tag.
			idx := -1
			for i, m := range mine {
				if m.src == gs && (tag == AnyTag || m.tag == tag) {
					idx = i
					break
				}
			}
			if idx < 0 || mine[idx].seq != gseq {
				return fmt.Errorf("receive (%d, %d) got message %d of rank %d; expected %+v", src, tag, gseq, gs, mine[max(idx, 0)])
			}
			m := mine[idx]
			if st.Source != gs || st.Tag != m.tag || st.Count != m.size+2 {
				return fmt.Errorf("status %+v for %+v", st, m)
			}
			if !slices.Equal(buf[:st.Count], fill(m)) {
				return fmt.Errorf("data of %+v corrupted", m)
			}
			mine = append(mine[:idx], mine[idx+1:]...)
		}
		if err := WaitAll(reqs, nil); err != nil {
			return err
		}
		return c.Barrier()
	})
	if mopt.Lossy {
		d, dup, re := f.NetStats()
		ls := f.LinkStats()
		t.Logf("network dropped %d, duplicated %d, reordered %d datagrams; links %+v", d, dup, re, ls)
		if d == 0 || ls.Retransmits+ls.FastRetransmits == 0 || ls.Duplicates == 0 {
			t.Errorf("faults not exercised")
		}
	}
}

func TestConcurrentWaitsOnOneRequest(t *testing.T) {
	run(t, 2, func(c *Comm) error {
		for i := 0; i < 50; i++ {
			if c.Rank() == 1 {
				if err := Send(c, []int{i}, 0, 0); err != nil {
					return err
				}
				continue
			}
			x := []int{-1}
			q, err := Irecv(c, x, 1, 0)
			if err != nil {
				return err
			}
			got := make(chan Status, 2)
			for k := 0; k < 2; k++ {
				go func() {
					st, _ := q.Wait()
					got <- st
				}()
			}
			a, b := <-got, <-got
			// Exactly one of the two waits reports the message.
			if (a.Source == 1) == (b.Source == 1) || x[0] != i {
				return fmt.Errorf("statuses %+v %+v, data %d", a, b, x[0])
			}
		}
		return nil
	})
}
