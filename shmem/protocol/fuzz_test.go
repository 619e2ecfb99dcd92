package protocol_test

import (
	"errors"
	"testing"

	"github.com/jiarun/jia/shmem/protocol"
)

// FuzzStep feeds a Machine arbitrary events and messages, as a broken or
// hostile peer could: it must never panic, and after a protocol error the
// engine stops the job (so does the fuzzer).
func FuzzStep(f *testing.F) {
	f.Add([]byte{0, 2, 1, 4, 2, 3, 1, 1, 0, 3, 3})
	f.Add([]byte{2, 1, 0, 1, 0, 0, 5, 2, 3, 0, 7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
	f.Add([]byte{4, 1, 0, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9})
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := protocol.New(protocol.Config{Rank: 1, Size: 3, PageSize: 8, CachePages: 2, Prefetch: 2, HomeMigration: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Step(protocol.Event{Kind: protocol.EvAlloc, Page: 2, N: 6, Placement: protocol.Placement{Kind: protocol.BlockCyclic}}); err != nil {
			t.Fatal(err)
		}
		next := func() int {
			if len(in) == 0 {
				return 0
			}
			b := in[0]
			in = in[1:]
			return int(b)
		}
		for len(in) > 0 {
			var ev protocol.Event
			switch k := next() % 8; k {
			case 0:
				ev = protocol.Event{Kind: protocol.EvReadFault, Page: protocol.PageID(next() % 10)}
			case 1:
				ev = protocol.Event{Kind: protocol.EvWriteFault, Page: protocol.PageID(next() % 10)}
			case 2, 3, 4:
				msg := &protocol.Message{
					Kind: protocol.MsgKind(1 + next()%15), From: next()%4 - 1, To: 1,
					Seq: uint64(next() % 8), Order: uint64(next() % 3), ID: next()%5 - 1,
					Scope: int64(next()%4 - 1), Epoch: uint64(next() % 3),
				}
				for i := next() % 4; i > 0; i-- {
					msg.Pages = append(msg.Pages, protocol.PageID(next()%10))
				}
				for i := next() % 3; i > 0; i-- {
					msg.Notices = append(msg.Notices, protocol.Notice{Page: protocol.PageID(next() % 10), Writer: next()%5 - 2, Cached: next()%2 == 0, Migrate: next()%2 == 0})
				}
				if next()%2 == 0 {
					msg.Data = make([]byte, 8*len(msg.Pages))
				}
				ev = protocol.Event{Kind: protocol.EvRecv, Msg: msg}
			case 5:
				ev = protocol.Event{Kind: protocol.EventKind(protocol.EvLock + protocol.EventKind(next()%7)), ID: next()%5 - 1}
			case 6:
				ev = protocol.Event{Kind: protocol.EvEvict, N: next() % 3}
			default:
				ev = protocol.Event{Kind: protocol.EvFree, Page: protocol.PageID(next() % 4)}
			}
			if _, err := m.Step(ev); errors.Is(err, protocol.ErrProtocol) {
				return
			}
		}
	})
}
