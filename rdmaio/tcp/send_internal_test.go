package tcp

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/rdmaiotest"
)

// TestSendsAcrossFullSocket: SENDs of every size, small ones coalesced into
// one buffer (send(2)) and large ones gathered (sendmsg(2)), posted while
// the receiver makes no progress so that the socket fills and writes stop
// in the middle of frames, all arrive intact and in order once it does.
func TestSendsAcrossFullSocket(t *testing.T) {
	const n, slot = 600, 1024
	job := "fullsock"
	p := rdmaiotest.NewPair(t, func(rank int) (rdmaio.Device, error) {
		return Open(rdmaio.Config{Job: job, Rank: rank, LocalSize: 2})
	}, n*slot, rdmaio.AccessAll)
	d1 := p.Dev[1].(*Device)
	q0 := p.RC[0].(*qp)
	q0.mu.Lock()
	fd := q0.conn.fd
	q0.mu.Unlock()
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4096); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := p.RC[1].PostRecv([]rdmaio.RecvWR{{ID: uint64(i), SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Alloc[1], i*slot, slot)}}}); err != nil {
			t.Fatal(err)
		}
	}
	size := func(i int) int { return 1 + (i*37)%slot }
	src := make([]byte, n*slot)
	for i := range src {
		src[i] = byte(i*7 + i/slot)
	}
	copy(p.AllocBuf[0], src)

	d1.pmu.Lock() // rank 1 makes no progress: nothing is read or acknowledged
	held := false
	for i := range n {
		wr := rdmaio.SendWR{ID: uint64(i), Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Alloc[0], i*slot, size(i))}}
		if i%5 == 0 && size(i) <= 64 {
			wr.SGL, wr.Inline = nil, src[i*slot:i*slot+size(i)]
		}
		if i%64 == 63 {
			wr.Flags = rdmaio.SendSignaled
		}
		if _, err := p.RC[0].PostSend([]rdmaio.SendWR{wr}); err != nil {
			d1.pmu.Unlock()
			t.Fatal(err)
		}
		q0.mu.Lock()
		held = held || q0.sqXmit < q0.sqTail
		q0.mu.Unlock()
	}
	d1.pmu.Unlock()
	if !held {
		t.Fatal("the socket never filled: the test did not exercise partial writes")
	}
	wc := make([]rdmaio.WorkCompletion, 16)
	for got := 0; got < n; {
		p.CQ[0].Poll(wc) // rank 0 writes the rest as the socket drains
		k := p.CQ[1].Poll(wc)
		for _, c := range wc[:k] {
			if c.Status != rdmaio.StatusSuccess {
				t.Fatalf("receive %d: %v", c.ID, c.Status)
			}
			if c.ID != uint64(got) || int(c.ByteLen) != size(got) {
				t.Fatalf("receive %d: id %d, %d bytes; want id %d, %d bytes", got, c.ID, c.ByteLen, got, size(got))
			}
			off := got * slot
			if string(p.AllocBuf[1][off:off+size(got)]) != string(src[off:off+size(got)]) {
				t.Fatalf("receive %d: payload differs", got)
			}
			got++
		}
	}
}
