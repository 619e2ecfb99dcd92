package tcp

import (
	"encoding/binary"
	"fmt"
	"os"
	"testing"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/rdmaiotest"
)

// TestPollOrder checks that receive completions keep their order whether a
// Poll takes them straight from its own progress pass or from the queue:
// batches of SENDs arrive while earlier completions are still queued
// (polled with slices shorter than the batches), and every receive must
// come out in the order posted, with its own message.
func TestPollOrder(t *testing.T) {
	job := fmt.Sprintf("pollorder-%d", os.Getpid())
	p := rdmaiotest.NewPair(t, func(rank int) (rdmaio.Device, error) {
		return Open(rdmaio.Config{Job: job, Rank: rank, LocalSize: 2})
	}, 4096, rdmaio.AccessAll)
	const batch = 3
	wc := make([]rdmaio.WorkCompletion, 2*batch)
	id := uint64(0)
	for round, size := range []int{1, 2, 3, 1, 2, 3} {
		base := id
		for i := range 2 * batch {
			off := 64 * i
			recv := []rdmaio.RecvWR{{ID: base + uint64(i), SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Alloc[1], off, 64)}}}
			if _, err := p.RC[1].PostRecv(recv); err != nil {
				t.Fatal(err)
			}
			binary.LittleEndian.PutUint64(p.AllocBuf[0][off:], base+uint64(i))
		}
		var got []uint64
		poll := func(n int) {
			k := p.CQ[1].Poll(wc[:n])
			for _, w := range wc[:k] {
				if w.Status != rdmaio.StatusSuccess || w.Opcode != rdmaio.WCRecv || w.ByteLen != 8 {
					t.Fatalf("round %d: completion %+v", round, w)
				}
				got = append(got, w.ID)
			}
		}
		for b := range 2 {
			send := make([]rdmaio.SendWR, batch)
			for i := range send {
				off := 64 * (b*batch + i)
				send[i] = rdmaio.SendWR{ID: id, Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Alloc[0], off, 8)}}
				id++
			}
			send[batch-1].Flags = rdmaio.SendSignaled
			if _, err := p.RC[0].PostSend(send); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 1000 && len(got) < (b+1)*batch-size; i++ {
				poll(size) // leaves up to size-1 of the batch queued
			}
		}
		for len(got) < 2*batch {
			poll(size)
		}
		rdmaiotest.PollN(t, p.CQ[0], wc, 2)
		for i, g := range got {
			want := base + uint64(i)
			if g != want {
				t.Fatalf("round %d (slices of %d): receives completed in order %v", round, size, got)
			}
			if v := binary.LittleEndian.Uint64(p.AllocBuf[1][64*i:]); v != want {
				t.Fatalf("round %d: receive %d holds message %d", round, want, v)
			}
		}
	}
}
