package comm

import (
	"errors"
	"fmt"
	"math"
	"testing"
)

// TestRecvDirect: blocking receives from a rank on this host take their
// eager messages straight from the transport (recvDirect), with the
// Status a posted receive gets (AnyTag, element counts), and keep MPI's
// matching rules around it: a message for another tag ahead in the ring
// sends the receive the general way (and the message to the unexpected
// queue, where the next receive for its tag finds it before a later one in
// the ring), a receive another call posted first gets the first message,
// and a message longer than the buffer is a truncation. Messages waiting
// in the ring when the receives start are all taken straight from it.
func TestRecvDirect(t *testing.T) {
	const rounds, queued = 300, 20
	var directs [2]int // ping-pong receives taken straight from the transport, per rank
	sent := make(chan struct{})
	trs := qranks(t, 2)
	// Endless spinning: no receive of the ping-pong gives up watching
	// because the peer lost its processor for a while.
	onQRanks(t, trs, &Options{Spin: math.MaxInt}, func(c *Comm) error {
		peer := 1 - c.Rank()
		buf := make([]float64, 2)
		for i := range rounds {
			if c.Rank() == 0 {
				buf[0], buf[1] = float64(i), -float64(i)
				if err := Send(c, buf, peer, 3+i%2); err != nil {
					return err
				}
			}
			st, err := Recv(c, buf, peer, AnyTag)
			if err != nil {
				return err
			}
			if buf[0] != float64(i) || buf[1] != -float64(i) || st != (Status{Source: peer, Tag: 3 + i%2, Count: 2, Bytes: 16}) {
				return fmt.Errorf("round %d: got %v with %+v", i, buf, st)
			}
			if c.Rank() == 1 {
				if err := Send(c, buf, peer, 3+i%2); err != nil {
					return err
				}
			}
		}
		// Another tag ahead, then a message queued as unexpected before
		// one still to come.
		one := make([]byte, 1)
		if c.Rank() == 0 {
			for _, m := range []struct {
				b   byte
				tag int
			}{{'A', 2}, {'B', 1}} {
				if err := Send(c, []byte{m.b}, 1, m.tag); err != nil {
					return err
				}
			}
			if _, err := Recv(c, one, 1, 9); err != nil {
				return err
			}
			if err := Send(c, []byte{'C'}, 1, 2); err != nil {
				return err
			}
		} else {
			for _, w := range []struct {
				tag  int
				want byte
			}{{1, 'B'}, {9, 0}, {2, 'A'}, {2, 'C'}} {
				if w.tag == 9 {
					if err := Send(c, one, 0, 9); err != nil {
						return err
					}
					continue
				}
				if _, err := Recv(c, one, 0, w.tag); err != nil {
					return err
				}
				if one[0] != w.want {
					return fmt.Errorf("receive for tag %d got %q, want %q", w.tag, one[0], w.want)
				}
			}
		}

		// A receive posted first matches first.
		x, y := make([]byte, 1), make([]byte, 1)
		if c.Rank() == 0 {
			if _, err := Recv(c, one, 1, 9); err != nil {
				return err
			}
			for _, b := range []byte("XY") {
				if err := Send(c, []byte{b}, 1, 1); err != nil {
					return err
				}
			}
		} else {
			q, err := Irecv(c, x, 0, AnyTag)
			if err != nil {
				return err
			}
			if err := Send(c, one, 0, 9); err != nil {
				return err
			}
			if _, err := Recv(c, y, 0, 1); err != nil {
				return err
			}
			if _, err := q.Wait(); err != nil {
				return err
			}
			if x[0] != 'X' || y[0] != 'Y' {
				return fmt.Errorf("posted receive got %q and blocking receive %q; want X and Y", x[0], y[0])
			}
		}

		// Truncation.
		if c.Rank() == 0 {
			if err := Send(c, []byte("too long"), 1, 5); err != nil {
				return err
			}
		} else {
			st, err := Recv(c, one, 0, 5)
			if !errors.Is(err, ErrTruncate) || st.Bytes != 1 || one[0] != 't' {
				return fmt.Errorf("8 bytes into 1: %+v, %q, %v; want the first byte and ErrTruncate", st, one[0], err)
			}
		}

		c.p.mu.Lock()
		directs[c.Rank()] = c.p.directs
		c.p.mu.Unlock()

		// Messages already in the ring when the receives start are all
		// taken straight from it: nothing polls the transport before
		// (rank 1 waits on a channel).
		if c.Rank() == 0 {
			for i := range queued {
				if err := Send(c, []byte{byte(i)}, 1, 6); err != nil {
					return err
				}
			}
			close(sent)
			return nil
		}
		<-sent
		for i := range queued {
			if _, err := Recv(c, one, 0, 6); err != nil {
				return err
			}
			if one[0] != byte(i) {
				return fmt.Errorf("queued message %d carries %d", i, one[0])
			}
		}
		c.p.mu.Lock()
		n := c.p.directs - directs[1]
		c.p.mu.Unlock()
		if n != queued {
			return fmt.Errorf("%d of %d messages waiting in the ring taken straight from it", n, queued)
		}
		return nil
	})
	// A ping-pong receive whose first round polls the transport (for the
	// completions of earlier sends) while its message arrives finds the
	// message queued and takes the general way: how often depends on the
	// load (the race detector, other tests).
	t.Logf("%v of %d ping-pong receives per rank taken straight from the transport", directs, rounds)
}

// TestRecvDirectLeavesOthers: a blocking receive whose message the
// transport does not offer where it lies (an eager message too long to be
// carried in the ring) or that is not an eager one (a rendezvous) goes to
// the engine at once. The ranks spin without end (Options.Spin) and the
// message is sent only once the receive has started (after its first
// round, which polls the transport), so a receive that kept watching for
// a message it can take would never return.
func TestRecvDirectLeavesOthers(t *testing.T) {
	trs := qranks(t, 2)
	onQRanks(t, trs, &Options{Spin: math.MaxInt}, func(c *Comm) error {
		for _, n := range []int{2 << 10, 10 << 10, 256 << 10, 8} {
			buf := make([]byte, n)
			if c.Rank() == 0 {
				if _, err := Recv(c, buf[:0], 1, 9); err != nil {
					return err
				}
				for i := range buf {
					buf[i] = byte(i * n)
				}
				if err := Send(c, buf, 1, 1); err != nil {
					return err
				}
				continue
			}
			if err := Send(c, buf[:0], 0, 9); err != nil {
				return err
			}
			st, err := Recv(c, buf, 0, 1)
			if err != nil {
				return err
			}
			if st.Bytes != n {
				return fmt.Errorf("%d-byte message: %+v", n, st)
			}
			for i, b := range buf {
				if b != byte(i*n) {
					return fmt.Errorf("%d-byte message: byte %d is %d", n, i, b)
				}
			}
		}
		return nil
	})
}
