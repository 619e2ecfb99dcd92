package rdmaio_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jiarun/jia/rdmaio"
	_ "github.com/jiarun/jia/rdmaio/shm" // registers the "shm" provider
)

// rank is what one rank of the example holds.
type rank struct {
	dev rdmaio.Device
	pd  rdmaio.PD
	cq  rdmaio.CQ
	qp  rdmaio.QP
	buf rdmaio.MR
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func openRank(job string, r int) *rank {
	var x rank
	var err error
	x.dev, err = rdmaio.Open("shm", rdmaio.Config{Job: job, Rank: r, LocalSize: 2})
	check(err)
	x.pd, err = x.dev.AllocPD()
	check(err)
	x.cq, err = x.dev.CreateCQ(64)
	check(err)
	x.qp, err = x.pd.CreateQP(rdmaio.QPInitAttr{Type: rdmaio.RC, SendCQ: x.cq, RecvCQ: x.cq})
	check(err)
	x.buf, err = x.pd.RegMR(make([]byte, 4096), rdmaio.AccessLocalWrite|rdmaio.AccessRemoteWrite|rdmaio.AccessRemoteRead)
	check(err)
	return &x
}

// connect moves a's QP to RTS, connected to b's QP. In a real job the
// address and QPN of b come from b's endpoint card.
func connect(a, b *rank) {
	check(a.qp.Modify(rdmaio.QPAttr{State: rdmaio.StateInit, Access: rdmaio.AccessRemoteWrite | rdmaio.AccessRemoteRead}))
	check(a.qp.Modify(rdmaio.QPAttr{State: rdmaio.StateRTR, Dest: rdmaio.AHAttr{Addr: b.dev.Addr()}, DestQPN: b.qp.QPN()}))
	check(a.qp.Modify(rdmaio.QPAttr{State: rdmaio.StateRTS, RNRRetry: rdmaio.RNRRetryInfinite}))
}

// Two ranks (here two devices of one process) connect an RC queue pair,
// exchange a message and write into each other's memory.
func Example() {
	r0, r1 := openRank("example", 0), openRank("example", 1)
	defer r0.dev.Close()
	defer r1.dev.Close()
	connect(r0, r1)
	connect(r1, r0)
	ctx := context.Background()
	wc := make([]rdmaio.WorkCompletion, 4)

	// SEND / RECEIVE: rank 1 posts a receive, rank 0 sends into it.
	_, err := r1.qp.PostRecv([]rdmaio.RecvWR{{ID: 1, SGL: []rdmaio.SGE{rdmaio.MRSGE(r1.buf, 0, 64)}}})
	check(err)
	n := copy(r0.buf.Bytes(), "hello, rank 1")
	_, err = r0.qp.PostSend([]rdmaio.SendWR{{ID: 2, Opcode: rdmaio.OpSendImm, Imm: 42, Flags: rdmaio.SendSignaled,
		SGL: []rdmaio.SGE{rdmaio.MRSGE(r0.buf, 0, n)}}})
	check(err)
	_, err = r1.cq.Wait(ctx, wc)
	check(err)
	check(wc[0].Err())
	fmt.Printf("rank 1: %v of %d bytes, imm %d: %q\n", wc[0].Opcode, wc[0].ByteLen, wc[0].Imm, r1.buf.Bytes()[:wc[0].ByteLen])
	_, err = r0.cq.Wait(ctx, wc)
	check(err)
	fmt.Printf("rank 0: %v %v\n", wc[0].Opcode, wc[0].Status)

	// RDMA WRITE: rank 0 writes at offset 100 of rank 1's region, named by
	// the region's remote key and address (in a real job, sent by rank 1).
	n = copy(r0.buf.Bytes()[512:], "written remotely")
	_, err = r0.qp.PostSend([]rdmaio.SendWR{{ID: 3, Opcode: rdmaio.OpRDMAWrite, Flags: rdmaio.SendSignaled,
		SGL: []rdmaio.SGE{rdmaio.MRSGE(r0.buf, 512, n)}, RemoteAddr: r1.buf.Addr() + 100, RKey: r1.buf.RKey()}})
	check(err)
	_, err = r0.cq.Wait(ctx, wc)
	check(err)
	check(wc[0].Err())
	fmt.Printf("rank 1 memory: %q\n", r1.buf.Bytes()[100:100+n])

	// A bad remote key is an error completion, and the QP enters ERR.
	_, err = r0.qp.PostSend([]rdmaio.SendWR{{ID: 4, Opcode: rdmaio.OpRDMAWrite, Flags: rdmaio.SendSignaled,
		SGL: []rdmaio.SGE{rdmaio.MRSGE(r0.buf, 0, 8)}, RemoteAddr: r1.buf.Addr(), RKey: r1.buf.RKey() + 1}})
	check(err)
	_, err = r0.cq.Wait(ctx, wc)
	check(err)
	fmt.Println(wc[0].Err(), r0.qp.State())
	// Output:
	// rank 1: RECV of 13 bytes, imm 42: "hello, rank 1"
	// rank 0: SEND SUCCESS
	// rank 1 memory: "written remotely"
	// rdmaio: qp 65536: work request 4 (RDMA_WRITE): REM_ACCESS_ERR ERR
}

// A rank publishes its endpoint card at rendezvous; its peers parse it,
// checking the job.
func ExampleCard() {
	dev, err := rdmaio.Open("shm", rdmaio.Config{Job: "job-7", Rank: 3})
	check(err)
	defer dev.Close()
	host, err := rdmaio.HostID()
	check(err)
	card := rdmaio.Card{Job: "job-7", Rank: 3, Host: host,
		Addrs: []rdmaio.EndpointAddr{{Provider: dev.Provider(), Addr: dev.Addr()}}}
	b, err := card.MarshalBinary()
	check(err)

	peer, err := rdmaio.ParseCard(b, "job-7")
	check(err)
	a, ok := peer.Addr("shm")
	fmt.Println(peer.Rank, ok, len(a.Addr) > 0)
	_, err = rdmaio.ParseCard(b, "job-8")
	fmt.Println(err)
	// Output:
	// 3 true true
	// rdmaio: card of rank 3: job "job-7", want "job-8": rdmaio: endpoint card of another job
}
