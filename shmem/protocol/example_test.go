package protocol_test

import (
	"fmt"

	"github.com/jiarun/jia/shmem/protocol"
)

// Two ranks; rank 0 is the home of every page. Rank 1 reads page 5, rank 0
// serves it, rank 1 installs it write-protected. The messages are handed
// over by hand here; an engine sends them.
func ExampleMachine() {
	ranks := make([]*protocol.Machine, 2)
	for r := range ranks {
		ranks[r], _ = protocol.New(protocol.Config{Rank: r, Size: 2})
		ranks[r].Step(protocol.Event{Kind: protocol.EvAlloc, Page: 0, N: 16,
			Placement: protocol.Placement{Kind: protocol.OnRank, Start: 0}})
	}
	acts, _ := ranks[1].Step(protocol.Event{Kind: protocol.EvReadFault, Page: 5})
	fmt.Println(acts)
	req := acts[0].Msg

	acts, _ = ranks[0].Step(protocol.Event{Kind: protocol.EvRecv, Msg: req})
	fmt.Println(acts)
	grant := acts[1].Msg
	grant.Data = make([]byte, 4096) // the engine fills in the home's copy

	acts, _ = ranks[1].Step(protocol.Event{Kind: protocol.EvRecv, Msg: grant})
	fmt.Println(acts)
	// Output:
	// [Send(PageReq 1→0 seq=1 pages=[5] epoch=0)]
	// [Install(5,ro,zero) SendPages(PageGrant 0→1 seq=1 pages=[5] epoch=0)]
	// [Install(5,ro)]
}
