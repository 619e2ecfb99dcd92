package shm_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jiarun/jia/rdmaio"
)

// TestSleepingWaits runs round trips between two ranks whose Waits go
// straight to sleep on their doorbells (no spinning, no yielding, no bound
// on the sleep that matters): every message and every acknowledgement of a
// signaled SEND must wake the peer's sleeping Wait, including those
// published with plain stores (storeRelease64 and the asymmetric fence).
// A lost wake-up fails the Wait at its deadline.
func TestSleepingWaits(t *testing.T) {
	opts := map[string]string{"spin": "0s", "yield": "0s", "sleep": "1h"}
	job := newJob()
	a := openEndpointCfg(t, rdmaio.Config{Job: job, Rank: 0, LocalSize: 2, Options: opts})
	z := openEndpointCfg(t, rdmaio.Config{Job: job, Rank: 1, LocalSize: 2, Options: opts})
	defer a.dev.Close()
	defer z.dev.Close()
	a.connect(parseCard(t, z.card()))
	z.connect(parseCard(t, a.card()))
	const rounds = 300
	// waitFor waits until e has counted wantSends signaled send
	// completions and wantRecvs receives, reposting the receives.
	waitFor := func(e *endpoint, sends, recvs *int, wantSends, wantRecvs int) error {
		for *sends < wantSends || *recvs < wantRecvs {
			// The deadline also bounds the sleep: a Wait that comes near
			// it was not woken (and then finds its completion, or not).
			dl := time.Now().Add(10 * time.Second)
			ctx, cancel := context.WithDeadline(context.Background(), dl)
			n, err := e.cq.Wait(ctx, e.wc)
			cancel()
			if err == nil && time.Until(dl) < time.Second {
				err = errors.New("not woken")
			}
			if err != nil {
				return fmt.Errorf("wait for %d sends and %d receives (have %d and %d): %w",
					wantSends, wantRecvs, *sends, *recvs, err)
			}
			for _, c := range e.wc[:n] {
				if c.Status != rdmaio.StatusSuccess {
					return c.Err()
				}
				if !c.Opcode.IsRecv() {
					*sends++
					continue
				}
				*recvs++
				if _, err := e.rc.PostRecv(e.rwrs[c.ID]); err != nil {
					return err
				}
			}
		}
		return nil
	}
	send := func(e *endpoint) error {
		_, err := e.rc.PostSend([]rdmaio.SendWR{{Opcode: rdmaio.OpSend, Flags: rdmaio.SendSignaled,
			SGL: []rdmaio.SGE{rdmaio.MRSGE(e.ctrl, ctrlSlots*ctrlSize, 8)}}})
		return err
	}
	done := make(chan error, 1)
	go func() {
		var sends, recvs int
		for i := 1; i <= rounds; i++ {
			// The ping alone, then the answer.
			if err := waitFor(z, &sends, &recvs, 0, i); err != nil {
				done <- err
				return
			}
			if err := send(z); err != nil {
				done <- err
				return
			}
		}
		done <- waitFor(z, &sends, &recvs, rounds, rounds)
	}()
	var sends, recvs int
	for i := 1; i <= rounds; i++ {
		if err := send(a); err != nil {
			t.Fatal(err)
		}
		if err := waitFor(a, &sends, &recvs, i, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
