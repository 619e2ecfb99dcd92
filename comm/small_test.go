package comm

import (
	"fmt"
	"testing"

	"github.com/jiarun/jia/comm/memtransport"
)

// TestEagerIsend: an Isend within the eager limit is complete before the
// receiver posts its receive (Test says so at once), its Status names the
// sender and the tag, its handle stays active until the completion is
// reported, and its message keeps its place among the sender's messages:
// eager and rendezvous messages with one tag arrive in the order sent.
func TestEagerIsend(t *testing.T) {
	for _, q := range []bool{false, true} {
		name := "mem"
		if q {
			name = "q"
		}
		t.Run(name, func(t *testing.T) {
			kind := testTransport
			if q {
				kind = "q"
			}
			withTransport(kind, func() { testEagerIsend(t) })
		})
	}
}

func testEagerIsend(t *testing.T) {
	const big = 64 << 10 // above the eager limit: rendezvous
	sizes := []int{1, big, 8, 0, big, 2}
	run(t, 2, func(c *Comm) error {
		if c.Rank() == 0 {
			reqs := make([]Request, len(sizes))
			for i, n := range sizes {
				b := make([]int32, n/4+1)
				b[0] = int32(i)
				var err error
				if reqs[i], err = Isend(c, b, 1, 5); err != nil {
					return err
				}
			}
			// The receiver has not posted anything yet (it waits for the
			// barrier): the small sends are complete, the large ones not.
			for i, n := range sizes {
				if n >= big {
					continue
				}
				if !reqs[i].Active() {
					return fmt.Errorf("send %d inactive before its completion was reported", i)
				}
				st, done, err := reqs[i].Test()
				if err != nil || !done {
					return fmt.Errorf("send %d of %d bytes: Test %v %v", i, n, done, err)
				}
				if st.Source != 0 || st.Tag != 5 || reqs[i].Active() {
					return fmt.Errorf("send %d: status %+v, active %v", i, st, reqs[i].Active())
				}
			}
			if err := c.Barrier(); err != nil {
				return err
			}
			return WaitAll(reqs, nil)
		}
		if err := c.Barrier(); err != nil {
			return err
		}
		for i, n := range sizes {
			b := make([]int32, n/4+1)
			st, err := Recv(c, b, 0, 5)
			if err != nil {
				return err
			}
			if b[0] != int32(i) || st.Count != len(b) {
				return fmt.Errorf("message %d: got message %d of %d elements", i, b[0], st.Count)
			}
		}
		return nil
	})
}

// TestWindowDoesNotAllocate extends TestHotPathsDoNotAllocate to OSU's
// message-rate window: 64 eager Isends and a WaitAll against 64 Irecvs and
// a WaitAll, then a blocking acknowledgement. Requests move between the
// pool of the calls without mu and the free list of the blocking calls;
// neither may drain into the other.
func TestWindowDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, kind := range []string{transportName(), "q"} {
		withTransport(kind, func() {
			const window = 64
			cs := worlds(t, 2, memtransport.Options{}, nil)
			sb, rb := make([]byte, 8), make([]byte, 8)
			ack := make([]byte, 4)
			sreqs, rreqs := make([]Request, window), make([]Request, window)
			n := allocs(t, cs, 100,
				func(c *Comm) error {
					for k := range sreqs {
						var err error
						if sreqs[k], err = Isend(c, sb, 1, 2); err != nil {
							return err
						}
					}
					if err := WaitAll(sreqs, nil); err != nil {
						return err
					}
					_, err := Recv(c, ack, 1, 3)
					return err
				},
				func(c *Comm) error {
					for k := range rreqs {
						var err error
						if rreqs[k], err = Irecv(c, rb, 0, 2); err != nil {
							return err
						}
					}
					if err := WaitAll(rreqs, nil); err != nil {
						return err
					}
					return Send(c, ack, 0, 3)
				})
			if n != 0 {
				t.Errorf("transport %q: %v allocations per window", transportName(), n)
			}
		})
	}
}
