package tcp_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jiarun/jia/rdmaio"
	_ "github.com/jiarun/jia/rdmaio/tcp" // registers the "tcp" provider
)

// Two ranks of one job (here two devices of one process, on loopback)
// connect an RC queue pair with the job secret, exchange a message and write
// into each other's memory. In a real job each rank opens one device and
// learns the other's address and QPN from its endpoint card.
func Example() {
	check := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	secret := []byte("the job's secret, from the launcher")
	type rank struct {
		dev rdmaio.Device
		cq  rdmaio.CQ
		qp  rdmaio.QP
		buf rdmaio.MR
	}
	open := func(r int) *rank {
		var x rank
		var err error
		x.dev, err = rdmaio.Open("tcp", rdmaio.Config{Job: "example", Rank: r, Secret: secret})
		check(err)
		pd, err := x.dev.AllocPD()
		check(err)
		x.cq, err = x.dev.CreateCQ(64)
		check(err)
		x.qp, err = pd.CreateQP(rdmaio.QPInitAttr{Type: rdmaio.RC, SendCQ: x.cq, RecvCQ: x.cq})
		check(err)
		x.buf, err = pd.RegMR(make([]byte, 4096), rdmaio.AccessLocalWrite|rdmaio.AccessRemoteWrite)
		check(err)
		check(x.qp.Modify(rdmaio.QPAttr{State: rdmaio.StateInit, Access: rdmaio.AccessRemoteWrite}))
		return &x
	}
	a, b := open(0), open(1)
	defer a.dev.Close()
	defer b.dev.Close()
	// INIT → RTR connects (one side dials, lazily); RTR → RTS allows sends.
	for _, p := range [][2]*rank{{a, b}, {b, a}} {
		check(p[0].qp.Modify(rdmaio.QPAttr{State: rdmaio.StateRTR, Dest: rdmaio.AHAttr{Addr: p[1].dev.Addr()}, DestQPN: p[1].qp.QPN()}))
	}
	for _, x := range []*rank{a, b} {
		check(x.qp.Modify(rdmaio.QPAttr{State: rdmaio.StateRTS, RNRRetry: rdmaio.RNRRetryInfinite}))
	}

	ctx := context.Background()
	wc := make([]rdmaio.WorkCompletion, 1)
	// b posts a receive; a sends; then a writes into b's buffer.
	_, err := b.qp.PostRecv([]rdmaio.RecvWR{{ID: 1, SGL: []rdmaio.SGE{rdmaio.MRSGE(b.buf, 0, 64)}}})
	check(err)
	_, err = a.qp.PostSend([]rdmaio.SendWR{
		{ID: 2, Opcode: rdmaio.OpSend, Inline: []byte("hello over tcp")},
		{ID: 3, Opcode: rdmaio.OpRDMAWrite, Inline: []byte("written"), RemoteAddr: b.buf.Addr() + 100, RKey: b.buf.RKey(),
			Flags: rdmaio.SendSignaled},
	})
	check(err)
	_, err = b.cq.Wait(ctx, wc)
	check(err)
	fmt.Printf("b received %q\n", b.buf.Bytes()[:wc[0].ByteLen])
	_, err = a.cq.Wait(ctx, wc)
	check(err)
	fmt.Printf("a's write %d: %v; b's memory holds %q\n", wc[0].ID, wc[0].Status, b.buf.Bytes()[100:107])
	// Output:
	// b received "hello over tcp"
	// a's write 3: SUCCESS; b's memory holds "written"
}
