package qtransport_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jiarun/jia/comm/qtransport"
	"github.com/jiarun/jia/comm/transport"
	_ "github.com/jiarun/jia/rdmaio/shm" // registers the "shm" provider
	_ "github.com/jiarun/jia/rdmaio/tcp" // registers the "tcp" provider
)

// printer is a transport.Handler that prints what it is handed.
type printer struct{ got int }

func (p *printer) Deliver(src int, msg []byte) {
	fmt.Printf("from rank %d: %q\n", src, msg)
	p.got++
}

func (p *printer) Complete(id uint64, err error) {
	fmt.Printf("transfer %d done: %v\n", id, err)
	p.got++
}

// Two ranks in one process (each with its own shm device) exchange a
// message, and rank 0 reads rank 1's memory. In a job each rank calls New
// with its own devices and runtime.(*Runtime).Exchange instead.
func Example() {
	trs, err := qtransport.OpenLocal(context.Background(), "shm", "example", 2, nil, qtransport.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		for _, tr := range trs {
			if err := tr.Close(); err != nil {
				log.Print(err)
			}
		}
	}()
	fmt.Println(trs[0].Caps().Name, trs[0].Caps().OneSided)

	// A message: a header and a gather list.
	if err := trs[0].Send(1, []byte("hello, "), [][]byte{[]byte("rank 1")}); err != nil {
		log.Fatal(err)
	}
	var h printer
	for h.got == 0 {
		if trs[1].Poll(&h) == 0 {
			trs[1].Wait(time.Millisecond)
		}
	}

	// One-sided: rank 1 exposes memory (its Region travels to rank 0 in a
	// message in real use), rank 0 reads it.
	mem := []byte("remote memory")
	reg, err := trs[1].Register(mem)
	if err != nil {
		log.Fatal(err)
	}
	buf := make([]byte, 6)
	if err := trs[0].Read(1, transport.Region{Key: reg.Key, Addr: reg.Addr + 7}, [][]byte{buf}, 42); err != nil {
		log.Fatal(err)
	}
	h.got = 0
	for h.got == 0 {
		if trs[0].Poll(&h) == 0 {
			trs[0].Wait(time.Millisecond)
		}
	}
	fmt.Printf("read %q\n", buf)
	if err := trs[1].Deregister(reg); err != nil {
		log.Fatal(err)
	}
	// Output:
	// shm true
	// from rank 0: "hello, rank 1"
	// transfer 42 done: <nil>
	// read "memory"
}
