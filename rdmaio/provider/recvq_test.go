package provider

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/jiarun/jia/rdmaio"
)

// sliceMem resolves an SGE as an offset into mem; LKey 0 does not resolve.
type sliceMem struct{ mem []byte }

func (m *sliceMem) ResolveLocal(sge *rdmaio.SGE, need rdmaio.Access) ([]byte, rdmaio.Status) {
	if sge.LKey == 0 || need != rdmaio.AccessLocalWrite || sge.Addr+uint64(sge.Length) > uint64(len(m.mem)) {
		return nil, rdmaio.StatusLocProtErr
	}
	return m.mem[sge.Addr : sge.Addr+uint64(sge.Length)], rdmaio.StatusSuccess
}

func recvWR(id uint64, sges ...rdmaio.SGE) rdmaio.RecvWR { return rdmaio.RecvWR{ID: id, SGL: sges} }

func TestRecvQueue(t *testing.T) {
	m := &sliceMem{mem: make([]byte, 64)}
	q := NewRecvQueue(2, 2)
	if q.Depth() != 2 || q.Len() != 0 || q.Front() != nil {
		t.Fatalf("new queue: depth %d, len %d, front %v", q.Depth(), q.Len(), q.Front())
	}
	wrs := []rdmaio.RecvWR{
		recvWR(1, rdmaio.SGE{LKey: 1, Addr: 0, Length: 8}, rdmaio.SGE{LKey: 1, Addr: 16, Length: 8}),
		recvWR(2, rdmaio.SGE{LKey: 1, Addr: 32, Length: 8}, rdmaio.SGE{LKey: 0, Addr: 40, Length: 8}),
		recvWR(3),
	}
	n, err := q.Post(m, wrs)
	if n != 2 || !errors.Is(err, rdmaio.ErrQueueFull) {
		t.Fatalf("Post into a queue of 2: %d, %v", n, err)
	}
	if q.Len() != 2 || q.Tail() != 2 {
		t.Fatalf("len %d, tail %d after two posts", q.Len(), q.Tail())
	}
	base := uintptr(unsafe.Pointer(&m.mem[0]))
	if !q.References(base+20, base+21) || q.References(base+8, base+16) || q.References(base+32, base+40) {
		t.Fatal("References: wrong answer for the posted buffers")
	}
	e := q.Front()
	if e.ID != 1 || e.Status != rdmaio.StatusSuccess || len(e.SG) != 2 || Total(e.SG) != 16 {
		t.Fatalf("first entry: %+v", e)
	}
	clear(e.SG)
	q.Pop()
	e = q.Front()
	if e.ID != 2 || e.Status != rdmaio.StatusLocProtErr || len(e.SG) != 0 || e.SG[:cap(e.SG)][0] != nil {
		t.Fatalf("entry with an SGE that does not resolve: %+v", e)
	}
	q.Pop()
	if q.Front() != nil || q.Len() != 0 {
		t.Fatal("queue not empty after two pops")
	}

	if n, err := q.Post(m, []rdmaio.RecvWR{recvWR(4, make([]rdmaio.SGE, 3)...)}); n != 0 || !errors.Is(err, rdmaio.ErrTooManySGE) {
		t.Fatalf("Post of 3 SGEs (max 2): %d, %v", n, err)
	}

	if n, err := q.Post(m, wrs[:1]); n != 1 || err != nil {
		t.Fatalf("Post: %d, %v", n, err)
	}
	q.Discard()
	if q.Len() != 0 || q.Tail() != 3 || q.References(base, base+64) {
		t.Fatalf("after Discard: len %d, tail %d", q.Len(), q.Tail())
	}
	for i := range q.ent {
		for _, b := range q.ent[i].SG[:cap(q.ent[i].SG)] {
			if b != nil {
				t.Fatal("Discard left a buffer referenced")
			}
		}
	}

	q.Post(m, wrs[:1])
	q.Reset()
	if q.Len() != 0 || q.Tail() != 0 || q.References(base, base+64) {
		t.Fatalf("after Reset: len %d, tail %d", q.Len(), q.Tail())
	}

	var zero RecvQueue
	if n, err := zero.Post(m, wrs[:1]); n != 0 || err == nil {
		t.Fatalf("Post into a zero queue: %d, %v", n, err)
	}
}

func TestRecvQueueAllocs(t *testing.T) {
	m := &sliceMem{mem: make([]byte, 64)}
	q := NewRecvQueue(4, 2)
	wrs := []rdmaio.RecvWR{recvWR(1, rdmaio.SGE{LKey: 1, Addr: 0, Length: 8}, rdmaio.SGE{LKey: 1, Addr: 16, Length: 8})}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := q.Post(m, wrs); err != nil {
			t.Fatal(err)
		}
		clear(q.Front().SG)
		q.Pop()
	})
	if allocs != 0 {
		t.Fatalf("Post and Pop: %v allocations", allocs)
	}
}

func TestOverlaps(t *testing.T) {
	b := make([]byte, 16)
	a := uintptr(unsafe.Pointer(&b[0]))
	for _, c := range []struct {
		lo, hi uintptr
		want   bool
	}{
		{a, a + 16, true},
		{a + 15, a + 16, true},
		{a + 16, a + 32, false},
		{a - 8, a, false},
		{a - 8, a + 1, true},
	} {
		if got := Overlaps(b, c.lo, c.hi); got != c.want {
			t.Errorf("Overlaps([%#x, +16), %#x, %#x) = %v", a, c.lo, c.hi, got)
		}
	}
	if Overlaps(nil, 0, ^uintptr(0)) || Overlaps(b[:0], a, a+16) {
		t.Error("an empty buffer overlaps")
	}
}

// TestRecvQueueOddDepth: a queue whose depth is not a power of two holds
// exactly depth requests and hands them out in order however often the
// positions wrap around.
func TestRecvQueueOddDepth(t *testing.T) {
	m := &sliceMem{mem: make([]byte, 64)}
	q := NewRecvQueue(5, 1)
	next, want := uint64(0), uint64(0)
	for round := range 40 {
		var wrs []rdmaio.RecvWR
		for range 6 {
			wrs = append(wrs, recvWR(next, rdmaio.SGE{LKey: 1, Addr: 8, Length: 8}))
			next++
		}
		n, err := q.Post(m, wrs)
		if free := 5 - (int(next) - 6 - int(want)); n != free || !errors.Is(err, rdmaio.ErrQueueFull) || !strings.Contains(err.Error(), "depth 5") {
			t.Fatalf("round %d: posted %d of 6 (room for %d): %v", round, n, free, err)
		}
		next -= uint64(6 - n)
		for range round%5 + 1 {
			e := q.Front()
			if e == nil || e.ID != want {
				t.Fatalf("round %d: front %+v, want request %d", round, e, want)
			}
			q.Pop()
			want++
		}
	}
}
