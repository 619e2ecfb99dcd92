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

// readerMem is a mem that also reads pages out and installs runs, as the
// pager's memory does; it logs those calls.
type readerMem struct{ mem }

func (m *readerMem) ReadPages(first protocol.PageID, dst []byte) error {
	for i := 0; i < len(dst)/ps; i++ {
		b, err := m.Page(first + protocol.PageID(i))
		if err != nil {
			return err
		}
		copy(dst[i*ps:], b)
	}
	m.log = append(m.log, fmt.Sprintf("read %d+%d", first, len(dst)/ps))
	return nil
}

func (m *readerMem) WritePage(p protocol.PageID, off int, b []byte) error {
	copy(m.pages[p][off:], b)
	m.log = append(m.log, fmt.Sprintf("write %d@%d+%d", p, off, len(b)))
	return nil
}

func (m *readerMem) InstallRun(first protocol.PageID, data []byte, writable bool) error {
	for i := 0; i < len(data)/ps; i++ {
		b := make([]byte, ps)
		copy(b, data[i*ps:])
		m.pages[first+protocol.PageID(i)] = b
	}
	m.log = append(m.log, fmt.Sprintf("install %d+%d rw=%v", first, len(data)/ps, writable))
	return nil
}

// A memory that reads pages out and installs runs gets consecutive pages
// in one call each: the grant it sends, the pages of a grant it receives,
// and the twins and diffs of its pages, with the same results as page by
// page.
func TestRunsOfPagesTakeOneCall(t *testing.T) {
	m := &readerMem{mem{pages: map[protocol.PageID][]byte{}}}
	n := &net{}
	x := &engine.Executor{Rank: 1, PageSize: ps, Mem: m, Net: n}
	for p := protocol.PageID(3); p < 7; p++ {
		m.pages[p] = bytes.Repeat([]byte{byte('a' + p)}, ps)
	}
	grant := &protocol.Message{Kind: protocol.MsgPageGrant, To: 2, Pages: []protocol.PageID{3, 4, 5, 9}}
	m.pages[9] = bytes.Repeat([]byte{'z'}, ps)
	if err := x.Execute([]protocol.Action{{Kind: protocol.ActSendPages, Msg: grant}}); err != nil {
		t.Fatal(err)
	}
	if got := string(n.sent[0].Data); got != "ddddddddeeeeeeeeffffffffzzzzzzzz" {
		t.Fatalf("grant data %q", got)
	}
	data := []byte("0000000011111111222222223333333344444444")
	acts := []protocol.Action{
		{Kind: protocol.ActInstall, Page: 20, Data: data[0:8]},
		{Kind: protocol.ActInstall, Page: 21, Data: data[8:16]},
		{Kind: protocol.ActInstall, Page: 22, Data: data[16:24]},
		{Kind: protocol.ActInstall, Page: 24, Data: data[24:32]},                 // not the next page
		{Kind: protocol.ActInstall, Page: 25, Data: data[32:40], Writable: true}, // other protection
	}
	if err := x.Execute(acts); err != nil {
		t.Fatal(err)
	}
	if string(m.pages[22]) != "22222222" || string(m.pages[25]) != "44444444" {
		t.Fatalf("pages %q %q", m.pages[22], m.pages[25])
	}
	if err := x.Execute([]protocol.Action{{Kind: protocol.ActMakeTwin, Page: 4}}); err != nil {
		t.Fatal(err)
	}
	m.pages[4][2] = 'E'
	if err := x.Execute([]protocol.Action{{Kind: protocol.ActSendDiffs, Msg: &protocol.Message{Pages: []protocol.PageID{4}}}}); err != nil {
		t.Fatal(err)
	}
	if want := diff.AppendPage(nil, 4, m.pages[4], bytes.Repeat([]byte{'e'}, ps)); !bytes.Equal(n.sent[1].Data, want) {
		t.Fatalf("diff % x, want % x", n.sent[1].Data, want)
	}
	zeros := []protocol.Action{
		{Kind: protocol.ActInstall, Page: 30, Writable: true},
		{Kind: protocol.ActInstall, Page: 31, Writable: true},
		{Kind: protocol.ActInstall, Page: 32, Writable: true, Data: data[0:8]}, // not zeros
	}
	if err := x.Execute(zeros); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.pages[31], make([]byte, ps)) || string(m.pages[32]) != "00000000" {
		t.Fatalf("pages %q %q", m.pages[31], m.pages[32])
	}
	// Watched home pages mapped with a snapshot: one run, their twins
	// made, as page by page.
	twins := x.Twins()
	watched := []protocol.Action{
		{Kind: protocol.ActInstall, Page: 40, Writable: true, Twin: true},
		{Kind: protocol.ActInstall, Page: 41, Writable: true, Twin: true},
		{Kind: protocol.ActInstall, Page: 42, Writable: true}, // no twin
	}
	if err := x.Execute(watched); err != nil {
		t.Fatal(err)
	}
	if n := x.Twins() - twins; n != 2 {
		t.Fatalf("%d twins made, want 2", n)
	}
	m.pages[41][1] = 'x'
	if changed, err := x.Changed([]protocol.PageID{40, 41}, nil); err != nil || len(changed) != 1 || changed[0] != 41 {
		t.Fatalf("changed %v, %v", changed, err)
	}
	// The comparison took the new contents as the twin.
	if changed, err := x.Changed([]protocol.PageID{40, 41}, nil); err != nil || len(changed) != 0 {
		t.Fatalf("changed %v, %v after the comparison", changed, err)
	}
	// Twins of consecutive pages are made in one read.
	if err := x.Execute([]protocol.Action{{Kind: protocol.ActMakeTwin, Page: 30}, {Kind: protocol.ActMakeTwin, Page: 31}}); err != nil {
		t.Fatal(err)
	}
	m.pages[30][0] = 'y'
	if changed, err := x.Changed([]protocol.PageID{30, 31, 41}, nil); err != nil || len(changed) != 1 || changed[0] != 30 {
		t.Fatalf("changed %v, %v", changed, err)
	}
	want := "[read 3+3 read 9+1 install 20+3 rw=false install 24 rw=false install 25 rw=true read 4+1 read 4+1 install 30+2 rw=true install 32 rw=true install 40+2 rw=true install 42 rw=true read 40+2 read 40+2 read 30+2 read 30+2 read 41+1]"
	if got := fmt.Sprint(m.log); got != want {
		t.Fatalf("calls %s\nwant  %s", got, want)
	}
}

// A memory that writes pages gets the runs of a sparse diff as writes; a
// corrupt batch changes nothing.
func TestSparseDiffsAreWritten(t *testing.T) {
	m := &readerMem{mem{pages: map[protocol.PageID][]byte{}}}
	x := &engine.Executor{Rank: 1, PageSize: ps, Mem: m, Net: &net{}}
	m.pages[2] = make([]byte, ps)
	m.pages[3] = make([]byte, ps)
	batch := diff.AppendPage(nil, 2, []byte{0, 5, 5, 0, 0, 0, 9, 0}, make([]byte, ps))
	batch = diff.AppendPage(batch, 3, []byte{1, 0, 0, 0, 0, 0, 0, 0}, make([]byte, ps))
	if err := x.Execute([]protocol.Action{{Kind: protocol.ActApplyDiffs, Msg: &protocol.Message{Data: batch}}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.pages[2], []byte{0, 5, 5, 0, 0, 0, 9, 0}) || m.pages[3][0] != 1 {
		t.Fatalf("pages % x % x", m.pages[2], m.pages[3])
	}
	if got := fmt.Sprint(m.log); got != "[write 2@1+2 write 2@6+1 write 3@0+1]" {
		t.Fatalf("calls %s", got)
	}
	bad := append(diff.AppendPage(nil, 2, []byte{7, 0, 0, 0, 0, 0, 0, 0}, make([]byte, ps)), batch[:len(batch)-1]...)
	if err := x.Execute([]protocol.Action{{Kind: protocol.ActApplyDiffs, Msg: &protocol.Message{Data: bad}}}); err == nil || m.pages[2][0] != 0 {
		t.Fatalf("corrupt batch: err %v, page % x", err, m.pages[2])
	}
}

// Differ finds the watched copies written since their twins were made and
// keeps the twins: they are the base of the copies' next diffs.
func TestDifferKeepsTheTwins(t *testing.T) {
	x, m, n := newExec()
	err := x.Execute([]protocol.Action{
		{Kind: protocol.ActInstall, Page: 3, Data: []byte{1, 1, 1, 1, 1, 1, 1, 1}, Writable: true, Twin: true},
		{Kind: protocol.ActInstall, Page: 4, Data: []byte{2, 2, 2, 2, 2, 2, 2, 2}, Writable: true, Twin: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	m.pages[4][0] = 9
	got, err := x.Differ([]protocol.PageID{3, 4}, nil)
	if err != nil || len(got) != 1 || got[0] != 4 {
		t.Fatalf("Differ = %v, %v; want [4]", got, err)
	}
	if got, _ := x.Differ([]protocol.PageID{3, 4}, nil); len(got) != 1 {
		t.Fatalf("second Differ = %v; want [4] again", got)
	}
	err = x.Execute([]protocol.Action{
		{Kind: protocol.ActSendDiffs, Msg: &protocol.Message{Kind: protocol.MsgDiff, To: 0, Pages: []protocol.PageID{4}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := diff.AppendPage(nil, 4, []byte{9, 2, 2, 2, 2, 2, 2, 2}, []byte{2, 2, 2, 2, 2, 2, 2, 2})
	if !bytes.Equal(n.sent[0].Data, want) {
		t.Fatalf("diff batch % x, want % x", n.sent[0].Data, want)
	}
	if _, err := x.Differ([]protocol.PageID{4}, nil); err == nil {
		t.Fatal("Differ of a page without a twin succeeded")
	}
}
