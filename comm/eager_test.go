package comm

import (
	"bytes"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/jiarun/jia/comm/memtransport"
)

// TestPerPeerEagerLimit checks that the eager limit is the destination's:
// rank 0 reaches rank 1 over a path whose transport prefers a 1 KiB limit
// and rank 2 over one that prefers 64 bytes, so one 512-byte message goes
// eagerly to rank 1 (the send completes before any receive is posted) and
// by rendezvous to rank 2 (it waits for the receive).
func TestPerPeerEagerLimit(t *testing.T) {
	limit := func(a, b int) int {
		if a+b == 1 { // the pair {0, 1}
			return 1 << 10
		}
		return 64
	}
	f := memtransport.New(3, memtransport.Options{PeerEagerLimit: limit})
	defer f.Close()
	cs := make([]*Comm, 3)
	for r := range cs {
		c, err := NewWorld(f.Endpoint(r), nil)
		if err != nil {
			t.Fatal(err)
		}
		cs[r] = c
	}
	for a := range cs {
		for b := range cs {
			if got, want := cs[a].p.eng.EagerLimit(b), limit(a, b); got != want {
				t.Errorf("rank %d: eager limit to %d is %d, want %d", a, b, got, want)
			}
		}
	}
	msg := bytes.Repeat([]byte("0123456789abcdef"), 32) // 512 bytes
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for r := 1; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() error {
				// Post the receive only when rank 0 says so.
				var tok [1]byte
				if _, err := Recv(cs[r], tok[:], 0, 1); err != nil {
					return err
				}
				got := make([]byte, len(msg))
				if _, err := Recv(cs[r], got, 0, 2); err != nil {
					return err
				}
				if !bytes.Equal(got, msg) {
					return fmt.Errorf("rank %d received %q", r, got)
				}
				return nil
			}()
		}()
	}
	errs[0] = func() error {
		// Whatever the checks find, finish the exchange so that ranks 1
		// and 2 end.
		c := cs[0]
		eager, err := Isend(c, msg, 1, 2)
		if err != nil {
			return err
		}
		_, eagerDone, eagerErr := eager.Test()
		eagerInFlight := c.p.eng.InFlight()
		rdv, err := Isend(c, msg, 2, 2)
		if err != nil {
			return err
		}
		_, rdvDone, rdvErr := rdv.Test()
		rdvInFlight := c.p.eng.InFlight()
		for r := 1; r < 3; r++ {
			if err := Send(c, []byte{1}, r, 1); err != nil {
				return err
			}
		}
		if _, err := eager.Wait(); err != nil {
			return err
		}
		if _, err := rdv.Wait(); err != nil {
			return err
		}
		switch {
		case eagerErr != nil || !eagerDone:
			return fmt.Errorf("512 bytes to rank 1 (limit 1 KiB): done %v, %v; want an eager send, complete at once", eagerDone, eagerErr)
		case eagerInFlight != 0:
			return fmt.Errorf("%d rendezvous in flight after an eager send", eagerInFlight)
		case rdvErr != nil || rdvDone:
			return fmt.Errorf("512 bytes to rank 2 (limit 64): done %v, %v before the receive was posted; want a rendezvous", rdvDone, rdvErr)
		case rdvInFlight != 1:
			return fmt.Errorf("%d rendezvous in flight, want 1", rdvInFlight)
		}
		return nil
	}()
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestRecycledRequestsClean checks that every request back in the pool is
// as clean as a new one, whatever completed it: eager sends (whose
// recycling clears only the header they set, proto.Op.ResetHeader),
// receives, and a rendezvous, reported by Wait, Test, WaitAll and WaitAny.
func TestRecycledRequestsClean(t *testing.T) {
	withTransport("q", func() {
		cs := worlds(t, 2, memtransport.Options{}, nil)
		small, large := make([]byte, 8), make([]byte, 256<<10)
		for round := range 4 {
			var sreqs, rreqs []Request
			for k := range 6 {
				b := small
				if k == 5 {
					b = large
				}
				r, err := Irecv(cs[1], make([]byte, len(b)), 0, k)
				if err != nil {
					t.Fatal(err)
				}
				rreqs = append(rreqs, r)
				s, err := Isend(cs[0], b, 1, k)
				if err != nil {
					t.Fatal(err)
				}
				sreqs = append(sreqs, s)
			}
			wait := func(reqs []Request) {
				switch round {
				case 0:
					if err := WaitAll(reqs, nil); err != nil {
						t.Fatal(err)
					}
				case 1:
					for _, q := range reqs {
						if _, err := q.Wait(); err != nil {
							t.Fatal(err)
						}
					}
				case 2:
					for _, q := range reqs {
						for {
							_, done, err := q.Test()
							if err != nil {
								t.Fatal(err)
							}
							if done {
								break
							}
						}
					}
				default:
					for range reqs {
						if _, _, err := WaitAny(reqs); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			done := make(chan struct{})
			go func() { wait(rreqs); close(done) }()
			wait(sreqs)
			<-done
		}
		for rank, c := range cs {
			p := c.p
			p.reqMu.Lock()
			if len(p.reqs) == 0 {
				t.Errorf("rank %d: no request recycled", rank)
			}
			for i, r := range p.reqs {
				if !reflect.ValueOf(&r.op).Elem().IsZero() || r.c != nil || r.call != "" || r.elem != 0 ||
					r.dirty || r.pooled || r.light || r.registered || r.staged || r.packed != nil {
					t.Errorf("rank %d: pooled request %d not clean: %+v", rank, i, r)
				}
			}
			p.reqMu.Unlock()
		}
	})
}
