package tcp_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/tcp"
)

// udRun sends n numbered datagrams from p.UD[0] to p.UD[1] and returns the
// numbers in the order they arrived: it waits until want(sent) have come
// (a minute at most, a hang guard), then polls a little longer for any
// extra one.
func udRun(t *testing.T, p *pair, n int, want func() int) []uint64 {
	t.Helper()
	const window = 64
	recv := func(i int) []rdmaio.RecvWR {
		return []rdmaio.RecvWR{{ID: uint64(i), SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Heap[1], 8*i, 8)}}}
	}
	for i := 0; i < window; i++ {
		if _, err := p.UD[1].PostRecv(recv(i)); err != nil {
			t.Fatal(err)
		}
	}
	var got []uint64
	wc := make([]rdmaio.WorkCompletion, 16)
	poll := func() int {
		p.CQ[0].Poll(wc)
		k := p.CQ[1].Poll(wc)
		for _, c := range wc[:k] {
			if c.Status != rdmaio.StatusSuccess || c.ByteLen != 8 {
				t.Fatalf("datagram completion %+v", c)
			}
			got = append(got, binary.LittleEndian.Uint64(p.Heap[1].Bytes()[8*c.ID:]))
			if _, err := p.UD[1].PostRecv(recv(int(c.ID))); err != nil {
				t.Fatal(err)
			}
		}
		return k
	}
	var payload [8]byte
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint64(payload[:], uint64(i))
		wr := rdmaio.SendWR{Opcode: rdmaio.OpSend, Inline: payload[:], AH: p.AH[0], RemoteQPN: p.UD[1].QPN(), RemoteQKey: qkey, Flags: rdmaio.SendSignaled}
		if _, err := p.UD[0].PostSend([]rdmaio.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		// Keep fewer datagrams in flight than receives are posted.
		for len(got) < want()*i/n-window/2 {
			poll()
		}
	}
	deadline := time.Now().Add(time.Minute)
	for len(got) < want() {
		if poll() == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d datagrams arrived: %v", len(got), want(), got)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	for end := time.Now().Add(20 * time.Millisecond); time.Now().Before(end); {
		poll()
	}
	if len(got) != want() {
		t.Fatalf("%d datagrams arrived, want %d: %v", len(got), want(), got)
	}
	return got
}

func faultStats(p *pair) tcp.FaultStats { return p.Dev[0].(*tcp.Device).FaultStats() }

// TestFaultDuplicate: with ud_dup=1 every datagram arrives twice.
func TestFaultDuplicate(t *testing.T) {
	p := newPair(t, 1<<20, map[string]string{"ud_dup": "1", "ud_seed": "3"})
	got := udRun(t, p, 24, func() int { return 48 })
	count := map[uint64]int{}
	for _, v := range got {
		count[v]++
	}
	for i := uint64(0); i < 24; i++ {
		if count[i] != 2 {
			t.Fatalf("datagram %d arrived %d times (all: %v)", i, count[i], got)
		}
	}
	if s := faultStats(p); s.Duplicated != 24 {
		t.Fatalf("stats %+v", s)
	}
}

// TestFaultDelayReorder: delayed and reordered datagrams all arrive, once,
// and some overtake others.
func TestFaultDelayReorder(t *testing.T) {
	p := newPair(t, 1<<20, map[string]string{"ud_delay": "0.2", "ud_reorder": "0.3", "ud_delay_time": "3ms", "ud_seed": "5"})
	const n = 200
	got := udRun(t, p, n, func() int { return n })
	seen := make([]bool, n)
	inversions := 0
	for i, v := range got {
		if v >= n || seen[v] {
			t.Fatalf("datagram %d unexpected or twice (all: %v)", v, got)
		}
		seen[v] = true
		if i > 0 && got[i-1] > v {
			inversions++
		}
	}
	s := faultStats(p)
	if s.Delayed == 0 || s.Reordered == 0 || inversions == 0 || s.Dropped != 0 {
		t.Fatalf("stats %+v, %d inversions", s, inversions)
	}
}

// TestFaultDropSeeded: the same seed drops the same datagrams.
func TestFaultDropSeeded(t *testing.T) {
	var runs [2][]uint64
	for r := range runs {
		p := newPair(t, 1<<20, map[string]string{"ud_drop": "0.25", "ud_seed": "11"})
		runs[r] = udRun(t, p, 64, func() int { return 64 - int(faultStats(p).Dropped) })
		if s := faultStats(p); int(s.Dropped)+len(runs[r]) != 64 {
			t.Fatalf("%d dropped + %d delivered != 64", s.Dropped, len(runs[r]))
		}
	}
	if len(runs[0]) == 64 || len(runs[0]) != len(runs[1]) {
		t.Fatalf("runs delivered %d and %d of 64", len(runs[0]), len(runs[1]))
	}
	for i := range runs[0] {
		if runs[0][i] != runs[1][i] {
			t.Fatalf("runs with one seed differ: %v and %v", runs[0], runs[1])
		}
	}
}
