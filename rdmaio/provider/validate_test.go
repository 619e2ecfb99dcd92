package provider

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jiarun/jia/rdmaio"
)

type fakeAH struct{}

func (fakeAH) Close() error { return nil }

func TestCheckSendWR(t *testing.T) {
	rc := &QPLimits{Type: rdmaio.RC, Cap: rdmaio.QPCap{MaxSendSGE: 2, MaxInline: 16}, MTU: 1024, MaxMsgSize: 1 << 20}
	ud := &QPLimits{Type: rdmaio.UD, Cap: rdmaio.QPCap{MaxSendSGE: 2, MaxInline: 16}, MTU: 1024, MaxMsgSize: 1 << 20}
	one := []rdmaio.SGE{{Addr: 8, Length: 8, LKey: 1}}
	cases := []struct {
		name string
		l    *QPLimits
		wr   rdmaio.SendWR
		want error
	}{
		{"send", rc, rdmaio.SendWR{Opcode: rdmaio.OpSend, SGL: one}, nil},
		{"unknown opcode", rc, rdmaio.SendWR{Opcode: 7}, rdmaio.ErrOpcode},
		{"too many SGEs", rc, rdmaio.SendWR{Opcode: rdmaio.OpSend, SGL: make([]rdmaio.SGE, 3)}, rdmaio.ErrTooManySGE},
		{"RC message too long", rc, rdmaio.SendWR{Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{{Length: 1 << 20}, {Length: 1}}}, rdmaio.ErrMessageTooLong},
		{"SGE lengths do not overflow", rc, rdmaio.SendWR{Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{{Length: math.MaxUint32}, {Length: math.MaxUint32}}}, rdmaio.ErrMessageTooLong},
		{"inline", rc, rdmaio.SendWR{Opcode: rdmaio.OpRDMAWrite, Inline: make([]byte, 16)}, nil},
		{"inline too long", rc, rdmaio.SendWR{Opcode: rdmaio.OpSend, Inline: make([]byte, 17)}, rdmaio.ErrMessageTooLong},
		{"inline with SGL", rc, rdmaio.SendWR{Opcode: rdmaio.OpSend, Inline: []byte{1}, SGL: one}, rdmaio.ErrInvalidArgument},
		{"inline read", rc, rdmaio.SendWR{Opcode: rdmaio.OpRDMARead, Inline: []byte{1}}, rdmaio.ErrOpcode},
		{"inline atomic", rc, rdmaio.SendWR{Opcode: rdmaio.OpAtomicFetchAdd, Inline: []byte{1}}, rdmaio.ErrOpcode},
		{"empty inline is inline", rc, rdmaio.SendWR{Opcode: rdmaio.OpSend, Inline: []byte{}}, nil},
		{"atomic", rc, rdmaio.SendWR{Opcode: rdmaio.OpAtomicCmpSwp, SGL: one, RemoteAddr: 64}, nil},
		{"atomic unaligned", rc, rdmaio.SendWR{Opcode: rdmaio.OpAtomicCmpSwp, SGL: one, RemoteAddr: 60}, rdmaio.ErrAtomic},
		{"atomic 4 bytes", rc, rdmaio.SendWR{Opcode: rdmaio.OpAtomicFetchAdd, SGL: []rdmaio.SGE{{Length: 4}}}, rdmaio.ErrAtomic},
		{"atomic 2 SGEs", rc, rdmaio.SendWR{Opcode: rdmaio.OpAtomicFetchAdd, SGL: []rdmaio.SGE{{Length: 8}, {Length: 8}}}, rdmaio.ErrAtomic},
		{"UD send", ud, rdmaio.SendWR{Opcode: rdmaio.OpSendImm, SGL: one, AH: fakeAH{}}, nil},
		{"UD MTU", ud, rdmaio.SendWR{Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{{Length: 1024}}, AH: fakeAH{}}, nil},
		{"UD over MTU", ud, rdmaio.SendWR{Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{{Length: 1000}, {Length: 25}}, AH: fakeAH{}}, rdmaio.ErrMessageTooLong},
		{"UD without AH", ud, rdmaio.SendWR{Opcode: rdmaio.OpSend, SGL: one}, rdmaio.ErrInvalidArgument},
		{"UD write", ud, rdmaio.SendWR{Opcode: rdmaio.OpRDMAWrite, SGL: one, AH: fakeAH{}}, rdmaio.ErrOpcode},
		{"UD atomic", ud, rdmaio.SendWR{Opcode: rdmaio.OpAtomicFetchAdd, SGL: one, AH: fakeAH{}}, rdmaio.ErrOpcode},
	}
	for _, c := range cases {
		err := CheckSendWR(c.l, &c.wr)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if err := CheckRecvWR(2, &rdmaio.RecvWR{SGL: make([]rdmaio.SGE, 3)}); !errors.Is(err, rdmaio.ErrTooManySGE) {
		t.Errorf("receive with 3 SGEs: %v", err)
	}
}

func TestRangeChecks(t *testing.T) {
	const max = math.MaxUint64
	cases := []struct {
		base, size, addr, length uint64
		in                       bool
	}{
		{100, 50, 100, 50, true},
		{100, 50, 100, 51, false},
		{100, 50, 149, 1, true},
		{100, 50, 150, 0, true},
		{100, 50, 151, 0, false},
		{100, 50, 99, 1, false},
		{100, 50, max, 2, false},
		{0, max, max - 1, 1, true},
		{10, 5, 12, max, false},
		{10, 5, max - 2, 8, false},
	}
	for _, c := range cases {
		if got := InRange(c.base, c.size, c.addr, c.length); got != c.in {
			t.Errorf("InRange(%d, %d, %d, %d) = %v", c.base, c.size, c.addr, c.length, got)
		}
	}
	all := rdmaio.AccessAll
	if CheckLocal(all, rdmaio.AccessLocalWrite, 0, 10, 0, 10) != rdmaio.StatusSuccess ||
		CheckLocal(0, rdmaio.AccessLocalWrite, 0, 10, 0, 10) != rdmaio.StatusLocProtErr ||
		CheckLocal(all, 0, 0, 10, 5, 6) != rdmaio.StatusLocProtErr {
		t.Errorf("CheckLocal")
	}
	if CheckRemote(all, rdmaio.AccessRemote, rdmaio.AccessRemoteWrite, 0, 10, 0, 10) != rdmaio.StatusSuccess ||
		CheckRemote(all, rdmaio.AccessRemoteRead, rdmaio.AccessRemoteWrite, 0, 10, 0, 10) != rdmaio.StatusRemAccessErr ||
		CheckRemote(rdmaio.AccessLocalWrite, rdmaio.AccessRemote, rdmaio.AccessRemoteWrite, 0, 10, 0, 10) != rdmaio.StatusRemAccessErr ||
		CheckRemote(all, rdmaio.AccessRemote, rdmaio.AccessRemoteRead, 0, 10, 1, 10) != rdmaio.StatusRemAccessErr {
		t.Errorf("CheckRemote")
	}
	for op, want := range map[rdmaio.Opcode][2]rdmaio.Access{
		rdmaio.OpSend:           {0, 0},
		rdmaio.OpRDMAWriteImm:   {0, rdmaio.AccessRemoteWrite},
		rdmaio.OpRDMARead:       {rdmaio.AccessLocalWrite, rdmaio.AccessRemoteRead},
		rdmaio.OpAtomicCmpSwp:   {rdmaio.AccessLocalWrite, rdmaio.AccessRemoteAtomic},
		rdmaio.OpAtomicFetchAdd: {rdmaio.AccessLocalWrite, rdmaio.AccessRemoteAtomic},
	} {
		if LocalAccess(op) != want[0] || RemoteAccess(op) != want[1] {
			t.Errorf("%v: local %v remote %v", op, LocalAccess(op), RemoteAccess(op))
		}
	}
}

func TestCheckRegisterAndCaps(t *testing.T) {
	if CheckRegister(nil, 0, 10) == nil || CheckRegister(make([]byte, 11), 0, 10) == nil ||
		CheckRegister([]byte{1}, rdmaio.AccessRemoteAtomic, 10) == nil || CheckRegister([]byte{1}, 1<<7, 10) == nil ||
		CheckRegister([]byte{1}, rdmaio.AccessAll, 10) != nil {
		t.Errorf("CheckRegister")
	}
	a := &rdmaio.DeviceAttr{MaxQPWR: 100, MaxSGE: 8, MaxInline: 64}
	c, err := FillCap(rdmaio.QPCap{MaxSendWR: 10}, rdmaio.QPCap{MaxSendWR: 1, MaxRecvWR: 2, MaxSendSGE: 3, MaxRecvSGE: 4, MaxInline: 5}, a)
	if err != nil || c != (rdmaio.QPCap{MaxSendWR: 10, MaxRecvWR: 2, MaxSendSGE: 3, MaxRecvSGE: 4, MaxInline: 5}) {
		t.Errorf("FillCap: %+v, %v", c, err)
	}
	if _, err := FillCap(rdmaio.QPCap{MaxSendSGE: 9}, rdmaio.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxRecvSGE: 1}, a); !errors.Is(err, rdmaio.ErrInvalidArgument) {
		t.Errorf("FillCap beyond MaxSGE: %v", err)
	}
}

func TestFillSRQ(t *testing.T) {
	a, err := FillSRQ(rdmaio.SRQAttr{MaxSGE: 2}, 16, 4, 32, 8)
	if err != nil || a != (rdmaio.SRQAttr{MaxWR: 16, MaxSGE: 2}) {
		t.Errorf("FillSRQ: %+v, %v", a, err)
	}
	for _, bad := range []rdmaio.SRQAttr{{MaxWR: 33}, {MaxSGE: 9}, {MaxWR: -1}, {MaxSGE: -1}} {
		_, err := FillSRQ(bad, 16, 4, 32, 8)
		if !errors.Is(err, rdmaio.ErrInvalidArgument) || !strings.Contains(err.Error(), "(1..32), MaxSGE") {
			t.Errorf("FillSRQ(%+v): %v", bad, err)
		}
	}
}

func TestKeyTable(t *testing.T) {
	if _, err := NewKeyTable[int](0); err == nil {
		t.Fatalf("table of 0 slots")
	}
	kt, err := NewKeyTable[int](3)
	if err != nil {
		t.Fatal(err)
	}
	vals := []int{10, 20, 30}
	var keys []uint32
	for i := range vals {
		k, err := kt.Insert(&vals[i])
		if err != nil || k == 0 {
			t.Fatalf("insert: %v, key %#x", err, k)
		}
		keys = append(keys, k)
	}
	if _, err := kt.Insert(&vals[0]); err == nil {
		t.Fatalf("insert into a full table")
	}
	for i, k := range keys {
		if v := kt.Lookup(k); v == nil || *v != vals[i] {
			t.Fatalf("lookup %#x", k)
		}
	}
	if kt.Lookup(0) != nil || kt.Lookup(keys[0]+1) != nil || kt.Lookup(^uint32(0)) != nil {
		t.Fatalf("invalid keys resolve")
	}
	if kt.Remove(keys[1]) == nil || kt.Remove(keys[1]) != nil || kt.Lookup(keys[1]) != nil {
		t.Fatalf("remove")
	}
	// The slot is reused with another tag: the stale key stays invalid.
	k, _ := kt.Insert(&vals[1])
	if KeyIndex(k) != KeyIndex(keys[1]) || k == keys[1] || kt.Lookup(keys[1]) != nil || kt.Lookup(k) == nil {
		t.Fatalf("reuse: old %#x new %#x", keys[1], k)
	}
	n := 0
	kt.Range(func(uint32, *int) bool { n++; return true })
	if n != 3 {
		t.Fatalf("Range visited %d", n)
	}
}

// TestKeyTableConcurrent: lookups race with inserts and removes without a
// lock (run with -race).
func TestKeyTableConcurrent(t *testing.T) {
	kt, _ := NewKeyTable[int](64)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := uint32(0); ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				if v := kt.Lookup(k % (64 << KeyBits)); v != nil && *v < 0 {
					t.Errorf("bad value")
				}
			}
		}()
	}
	x := 1
	for i := 0; i < 5000; i++ {
		k, err := kt.Insert(&x)
		if err != nil {
			t.Fatal(err)
		}
		kt.Remove(k)
	}
	close(stop)
	wg.Wait()
}

// TestScatterGather compares the copies with a reference over random
// splits of the buffers.
func TestScatterGather(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	split := func(b []byte) [][]byte {
		var out [][]byte
		for len(b) > 0 {
			n := rng.IntN(len(b) + 1)
			out = append(out, b[:n])
			b = b[n:]
		}
		return out
	}
	for i := 0; i < 500; i++ {
		src := make([]byte, rng.IntN(300))
		for j := range src {
			src[j] = byte(rng.Uint32())
		}
		dst := make([]byte, rng.IntN(300))
		n := min(len(src), len(dst))
		if got := Gather(dst, split(src)); got != n || !bytes.Equal(dst[:n], src[:n]) {
			t.Fatalf("Gather copied %d", got)
		}
		clear(dst)
		if got := Scatter(split(dst), src); got != n || !bytes.Equal(dst[:n], src[:n]) {
			t.Fatalf("Scatter copied %d", got)
		}
		clear(dst)
		if got := CopySG(split(dst), split(src)); got != n || !bytes.Equal(dst[:n], src[:n]) || Total(split(src)) != len(src) {
			t.Fatalf("CopySG copied %d", got)
		}
	}
}

// TestBackoffPhases: a wait goes through spin, yield and sleep in order
// (no timing assertions beyond the order).
func TestBackoffPhases(t *testing.T) {
	var b Backoff
	b.Reset(WaitPolicy{Spin: time.Microsecond, Yield: time.Microsecond, Sleep: time.Millisecond})
	last := PhaseSpin
	for i := 0; i < 1e7 && last != PhaseSleep; i++ {
		p := b.Next()
		if p < last {
			t.Fatalf("phase went back from %d to %d", last, p)
		}
		last = p
		if i%1000 == 0 {
			time.Sleep(time.Microsecond)
		}
	}
	if last != PhaseSleep {
		t.Fatalf("never reached the sleep phase")
	}
	b.Reset(WaitPolicy{Sleep: time.Millisecond})
	if b.Next() != PhaseSleep {
		t.Fatalf("a policy without spin or yield does not sleep at once")
	}
	if p := DefaultWaitPolicy(1 << 20); p.Spin >= DefaultWaitPolicy(1).Spin {
		t.Fatalf("oversubscribed policy spins as long: %+v", p)
	}
}
