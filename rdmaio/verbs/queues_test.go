package verbs

import (
	"testing"

	"github.com/jiarun/jia/rdmaio"
)

func TestWRID(t *testing.T) {
	k, s := splitWRID(wrID(0xdeadbeef, 0x12345678))
	if k != 0xdeadbeef || s != 0x12345678 {
		t.Fatalf("split: %#x %#x", k, s)
	}
}

// TestSendQueue: a completion retires the requests before it (unsignaled
// ones) and frees their room; stale slots are ignored; positions wrap
// around the 32-bit slot numbers.
func TestSendQueue(t *testing.T) {
	q := newSendQueue(3, 2)
	if q.room() != 3 {
		t.Fatalf("room %d", q.room())
	}
	s0 := q.add(10, rdmaio.WCSend, nil)
	q.add(11, rdmaio.WCRDMAWrite, nil)
	s2 := q.add(12, rdmaio.WCFetchAdd, nil)
	if q.room() != 0 {
		t.Fatalf("room %d after 3", q.room())
	}
	id, op, ok := q.done(s2 - 1) // the second completes: the first is retired with it
	if !ok || id != 11 || op != rdmaio.WCRDMAWrite || q.room() != 2 {
		t.Fatalf("done: %d %v %v room %d", id, op, ok, q.room())
	}
	if _, _, ok := q.done(s0); ok {
		t.Fatal("retired slot completed again")
	}
	if _, _, ok := q.done(s2 + 5); ok {
		t.Fatal("slot never posted completed")
	}
	s3 := q.add(13, rdmaio.WCSend, nil)
	q.unadd(1) // refused by the hardware
	if q.room() != 2 {
		t.Fatalf("room after unadd %d", q.room())
	}
	if id, _, ok := q.done(s2); !ok || id != 12 {
		t.Fatalf("done(s2) = %d %v", id, ok)
	}
	_ = s3
	// Wrap the 32-bit slot numbers.
	q.head, q.tail = 1<<32-2, 1<<32-2
	a := q.add(1, rdmaio.WCSend, nil)
	b := q.add(2, rdmaio.WCSend, nil)
	c := q.add(3, rdmaio.WCSend, nil)
	if a != 1<<32-2 || c != 0 {
		t.Fatalf("slots %d %d %d", a, b, c)
	}
	if id, _, ok := q.done(c); !ok || id != 3 || q.room() != 3 {
		t.Fatalf("wrapped done: %d %v room %d", id, ok, q.room())
	}
	q.add(4, rdmaio.WCSend, nil)
	q.reset()
	if q.room() != 3 {
		t.Fatalf("room after reset %d", q.room())
	}
}

// TestRecvQueue: slots complete in any order (SRQ), each once.
func TestRecvQueue(t *testing.T) {
	q := newRecvQueue(3, 2)
	a, b, c := q.add(100, nil), q.add(101, nil), q.add(102, nil)
	if q.room() != 0 || a == b || b == c || a == c {
		t.Fatalf("slots %d %d %d room %d", a, b, c, q.room())
	}
	if id, ok := q.done(b); !ok || id != 101 {
		t.Fatalf("done(b) = %d %v", id, ok)
	}
	if _, ok := q.done(b); ok {
		t.Fatal("slot completed twice")
	}
	if _, ok := q.done(99); ok {
		t.Fatal("out-of-range slot completed")
	}
	d := q.add(103, nil)
	if d != b {
		t.Fatalf("freed slot %d not reused (got %d)", b, d)
	}
	q.unadd(d)
	if q.room() != 1 {
		t.Fatalf("room %d", q.room())
	}
	if id, ok := q.done(c); !ok || id != 102 {
		t.Fatalf("done(c) = %d %v", id, ok)
	}
	q.reset()
	if q.room() != 3 {
		t.Fatalf("room after reset %d", q.room())
	}
	if _, ok := q.done(a); ok {
		t.Fatal("slot completed after reset")
	}
}

// TestQueuesDoNotAllocate: the bookkeeping on the posting and polling
// paths allocates nothing.
func TestQueuesDoNotAllocate(t *testing.T) {
	sq, rq := newSendQueue(8, 2), newRecvQueue(8, 2)
	sgl := []rdmaio.SGE{{Addr: 0x1000, Length: 8, LKey: 1}}
	n := testing.AllocsPerRun(100, func() {
		sq.mu.Lock()
		s := sq.add(1, rdmaio.WCSend, sgl)
		sq.mu.Unlock()
		sq.done(s)
		rq.mu.Lock()
		r := rq.add(2, sgl)
		rq.mu.Unlock()
		rq.done(r)
		splitWRID(wrID(1, 2))
		wcStatus(5)
	})
	if n != 0 {
		t.Fatalf("%v allocations per post/complete", n)
	}
}

// TestReferences: outstanding work requests keep the memory of their SGEs
// in use until they complete, and only that memory.
func TestReferences(t *testing.T) {
	sq, rq := newSendQueue(4, 2), newRecvQueue(4, 2)
	sq.mu.Lock()
	a := sq.add(1, rdmaio.WCSend, []rdmaio.SGE{{Addr: 0x1000, Length: 16}, {Addr: 0x3000, Length: 8}})
	b := sq.add(2, rdmaio.WCSend, nil) // inline
	sq.mu.Unlock()
	rq.mu.Lock()
	r := rq.add(3, []rdmaio.SGE{{Addr: 0x5000, Length: 64}})
	rq.mu.Unlock()
	cases := []struct {
		lo, hi uint64
		send   bool
		recv   bool
	}{
		{0x0, 0x1000, false, false},
		{0x0, 0x1001, true, false},
		{0x100f, 0x2000, true, false},
		{0x1010, 0x3000, false, false},
		{0x3007, 0x3008, true, false},
		{0x5000, 0x6000, false, true},
		{0x5040, 0x6000, false, false},
	}
	for _, c := range cases {
		if got := sq.references(c.lo, c.hi); got != c.send {
			t.Errorf("send queue references [%#x, %#x) = %v", c.lo, c.hi, got)
		}
		if got := rq.references(c.lo, c.hi); got != c.recv {
			t.Errorf("receive queue references [%#x, %#x) = %v", c.lo, c.hi, got)
		}
	}
	sq.done(b) // retires a too
	rq.done(r)
	_ = a
	if sq.references(0, 1<<62) || rq.references(0, 1<<62) {
		t.Fatal("completed work requests still reference memory")
	}
}
