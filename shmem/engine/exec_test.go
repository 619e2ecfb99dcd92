package engine_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/jiarun/jia/shmem/diff"
	"github.com/jiarun/jia/shmem/engine"
	"github.com/jiarun/jia/shmem/protocol"
)

const ps = 8

// mem is pages in a map; it logs what the executor asks of it.
type mem struct {
	pages map[protocol.PageID][]byte
	log   []string
}

func (m *mem) Page(p protocol.PageID) ([]byte, error) {
	b, ok := m.pages[p]
	if !ok {
		return nil, fmt.Errorf("page %d not mapped", p)
	}
	return b, nil
}

func (m *mem) Install(p protocol.PageID, data []byte, writable bool) error {
	b := make([]byte, ps)
	copy(b, data)
	m.pages[p] = b
	m.log = append(m.log, fmt.Sprintf("install %d rw=%v", p, writable))
	return nil
}

func (m *mem) Protect(pages []protocol.PageID) error {
	m.log = append(m.log, fmt.Sprintf("protect %v", pages))
	return nil
}

func (m *mem) Unprotect(p protocol.PageID) error {
	m.log = append(m.log, fmt.Sprintf("unprotect %d", p))
	return nil
}

func (m *mem) Zap(pages []protocol.PageID) error {
	for _, p := range pages {
		delete(m.pages, p)
	}
	m.log = append(m.log, fmt.Sprintf("zap %v", pages))
	return nil
}

func (m *mem) Wake(p protocol.PageID) error {
	m.log = append(m.log, fmt.Sprintf("wake %d", p))
	return nil
}

type net struct{ sent []*protocol.Message }

func (n *net) Send(msg *protocol.Message) error { n.sent = append(n.sent, msg); return nil }

func newExec() (*engine.Executor, *mem, *net) {
	m := &mem{pages: map[protocol.PageID][]byte{}}
	n := &net{}
	return &engine.Executor{Rank: 1, PageSize: ps, Mem: m, Net: n}, m, n
}

func TestDiffOfATwinnedPageGoesHomeAndTheTwinGoes(t *testing.T) {
	x, m, n := newExec()
	err := x.Execute([]protocol.Action{
		{Kind: protocol.ActInstall, Page: 3, Data: []byte{1, 1, 1, 1, 1, 1, 1, 1}, Writable: true, Twin: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	m.pages[3][2] = 9 // the program writes
	err = x.Execute([]protocol.Action{
		{Kind: protocol.ActProtect, Pages: []protocol.PageID{3}},
		{Kind: protocol.ActSendDiffs, Msg: &protocol.Message{Kind: protocol.MsgDiff, To: 0, Pages: []protocol.PageID{3}}},
		{Kind: protocol.ActZap, Pages: []protocol.PageID{3}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if x.Twins() != 0 || len(n.sent) != 1 {
		t.Fatalf("twins %d, sent %d", x.Twins(), len(n.sent))
	}
	want := diff.AppendPage(nil, 3, []byte{1, 1, 9, 1, 1, 1, 1, 1}, []byte{1, 1, 1, 1, 1, 1, 1, 1})
	if !bytes.Equal(n.sent[0].Data, want) {
		t.Fatalf("diff batch % x, want % x", n.sent[0].Data, want)
	}
}

func TestPageGrantCarriesTheHomeCopies(t *testing.T) {
	x, m, n := newExec()
	m.pages[4] = []byte("abcdefgh")
	m.pages[5] = []byte("ijklmnop")
	msg := &protocol.Message{Kind: protocol.MsgPageGrant, To: 2, Pages: []protocol.PageID{5, 4}}
	if err := x.Execute([]protocol.Action{{Kind: protocol.ActSendPages, Msg: msg}}); err != nil {
		t.Fatal(err)
	}
	if string(n.sent[0].Data) != "ijklmnopabcdefgh" {
		t.Fatalf("grant data %q", n.sent[0].Data)
	}
}

// Diffs applied to a home page that has a twin reach the twin too, so that
// the page's own later diff carries only its own writes.
func TestApplyDiffsUpdatesTheTwin(t *testing.T) {
	x, m, _ := newExec()
	m.pages[6] = make([]byte, ps)
	if err := x.Execute([]protocol.Action{{Kind: protocol.ActMakeTwin, Page: 6}}); err != nil {
		t.Fatal(err)
	}
	m.pages[6][0] = 1 // this rank's write
	batch := diff.AppendPage(nil, 6, []byte{0, 0, 0, 0, 0, 0, 0, 7}, make([]byte, ps))
	if err := x.Execute([]protocol.Action{{Kind: protocol.ActApplyDiffs, Msg: &protocol.Message{Data: batch}}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.pages[6], []byte{1, 0, 0, 0, 0, 0, 0, 7}) {
		t.Fatalf("page % x", m.pages[6])
	}
	out := &net{}
	x.Net = out
	if err := x.Execute([]protocol.Action{{Kind: protocol.ActSendDiffs, Msg: &protocol.Message{Pages: []protocol.PageID{6}}}}); err != nil {
		t.Fatal(err)
	}
	if want := diff.AppendPage(nil, 6, []byte{1, 0, 0, 0, 0, 0, 0, 7}, []byte{0, 0, 0, 0, 0, 0, 0, 7}); !bytes.Equal(out.sent[0].Data, want) {
		t.Fatalf("own diff % x, want only the own write % x", out.sent[0].Data, want)
	}
}

func TestZapOfATwinnedPageIsRefused(t *testing.T) {
	x, m, _ := newExec()
	m.pages[1] = make([]byte, ps)
	x.Execute([]protocol.Action{{Kind: protocol.ActMakeTwin, Page: 1}})
	err := x.Execute([]protocol.Action{{Kind: protocol.ActZap, Pages: []protocol.PageID{1}}})
	if err == nil || !strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), "twin") {
		t.Fatalf("err = %v", err)
	}
}

func TestDoneIsReported(t *testing.T) {
	x, _, _ := newExec()
	var got string
	x.Done = func(op protocol.EventKind, id int) { got = fmt.Sprintf("%v(%d)", op, id) }
	x.Execute([]protocol.Action{{Kind: protocol.ActDone, Op: protocol.EvUnlock, ID: 7}})
	if got != "Unlock(7)" {
		t.Fatalf("done %q", got)
	}
}
