package tcp

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/rdmaiotest"
)

// TestReadResponseDirect checks that the responses to large RDMA READs go
// from the socket straight into their destination, never through the
// device's read buffer, while the responder's own SENDs (small and large)
// and acknowledgements share the connection with them, and that every
// byte lands where it belongs.
func TestReadResponseDirect(t *testing.T) {
	const (
		chunk  = 3*directMin + 123 // a READ: not a multiple of anything
		nread  = 4                 // READs outstanding at once
		small  = 40                // a SEND the responder interleaves
		large  = directMin + 77    // a SEND read straight into its receive
		rounds = 40
		size   = 1 << 20
	)
	job := fmt.Sprintf("readrsp-%d", os.Getpid())
	p := rdmaiotest.NewPair(t, func(rank int) (rdmaio.Device, error) {
		return Open(rdmaio.Config{Job: job, Rank: rank, LocalSize: 2})
	}, size, rdmaio.AccessAll)
	src, dst := p.AllocBuf[1], p.AllocBuf[0]
	for i := range src {
		src[i] = byte(i*131 + i>>9)
	}
	const recvOff = nread * chunk // rank 0's receive buffers follow the READ targets
	wc := make([]rdmaio.WorkCompletion, 16)
	for r := range rounds {
		clear(dst)
		for i := range 2 {
			recv := rdmaio.RecvWR{ID: uint64(i), SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Alloc[0], recvOff+i*large, large)}}
			if _, err := p.RC[0].PostRecv([]rdmaio.RecvWR{recv}); err != nil {
				t.Fatal(err)
			}
		}
		reads := make([]rdmaio.SendWR, nread)
		for i := range reads {
			from := (r*7 + i*chunk) % (size - recvOff - chunk)
			reads[i] = rdmaio.SendWR{ID: uint64(i), Opcode: rdmaio.OpRDMARead, Flags: rdmaio.SendSignaled,
				SGL:        []rdmaio.SGE{rdmaio.MRSGE(p.Alloc[0], i*chunk, chunk)},
				RemoteAddr: p.Alloc[1].Addr() + uint64(from), RKey: p.Alloc[1].RKey()}
		}
		if _, err := p.RC[0].PostSend(reads[:nread/2]); err != nil {
			t.Fatal(err)
		}
		// The responder's SENDs go out between READ responses (those it
		// has queued go first).
		sends := []rdmaio.SendWR{
			{ID: 0, Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Alloc[1], r, small)}},
			{ID: 1, Opcode: rdmaio.OpSend, Flags: rdmaio.SendSignaled, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Alloc[1], 3*r, large)}},
		}
		if _, err := p.RC[1].PostSend(sends[:1]); err != nil {
			t.Fatal(err)
		}
		if _, err := p.RC[0].PostSend(reads[nread/2:]); err != nil {
			t.Fatal(err)
		}
		if _, err := p.RC[1].PostSend(sends[1:]); err != nil {
			t.Fatal(err)
		}
		// The requester's READs and receives, and the responder's
		// signaled SEND (the responder serves the READs in its Polls too).
		var got [2]int
		for i := 0; got[0] < nread+2 || got[1] < 1; i++ {
			if i > 50_000_000 {
				t.Fatalf("round %d: completions %v of %d and 1", r, got, nread+2)
			}
			for rank, cq := range p.CQ {
				k := cq.Poll(wc)
				for _, w := range wc[:k] {
					if w.Status != rdmaio.StatusSuccess {
						t.Fatalf("round %d: rank %d completion %+v", r, rank, w)
					}
				}
				got[rank] += k
			}
		}
		for i, rd := range reads {
			from := int(rd.RemoteAddr - p.Alloc[1].Addr())
			if !bytes.Equal(dst[i*chunk:(i+1)*chunk], src[from:from+chunk]) {
				t.Fatalf("round %d: READ %d delivered other bytes", r, i)
			}
		}
		if !bytes.Equal(dst[recvOff:recvOff+small], src[r:r+small]) ||
			!bytes.Equal(dst[recvOff+large:recvOff+2*large], src[3*r:3*r+large]) {
			t.Fatalf("round %d: a SEND delivered other bytes", r)
		}
	}
	q0 := p.RC[0].(*qp)
	q0.mu.Lock()
	copied := q0.rspCopied
	q0.mu.Unlock()
	if copied != 0 {
		t.Errorf("%d bytes of READ responses went through the read buffer, want 0", copied)
	}
}
