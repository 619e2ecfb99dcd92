package rdmaiotest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jiarun/jia/rdmaio"
)

// Hang guards. They only bound a test that would otherwise hang; no test
// asserts on timing.
const (
	waitTimeout = 60 * time.Second
	cqDepth     = 1 << 14
)

// world is a test's set of ranks, each with one PD and one CQ, and the
// completions collected from them.
type world struct {
	t     testing.TB
	f     Fabric
	ranks []*rank
	// got holds completions polled from each rank's CQ that the test has not
	// taken yet.
	got    map[rdmaio.CQ][]rdmaio.WorkCompletion
	wc     []rdmaio.WorkCompletion
	closed bool
}

type rank struct {
	w    *world
	i    int
	dev  rdmaio.Device
	pd   rdmaio.PD
	cq   rdmaio.CQ
	cqs  []rdmaio.CQ // extra CQs
	qps  []rdmaio.QP
	srqs []rdmaio.SRQ
	ahs  []rdmaio.AH
	mrs  []rdmaio.MR
	mem  [][]byte // from PD.Alloc
}

func newWorld(t testing.TB, f Fabric, n int) *world {
	t.Helper()
	devs := f.Open(t, n)
	if len(devs) != n {
		t.Fatalf("fabric opened %d devices, want %d", len(devs), n)
	}
	return newWorldOf(t, f, devs)
}

// newWorldOf is newWorld for devices the test opened itself.
func newWorldOf(t testing.TB, f Fabric, devs []rdmaio.Device) *world {
	t.Helper()
	w := &world{t: t, f: f, got: map[rdmaio.CQ][]rdmaio.WorkCompletion{}, wc: make([]rdmaio.WorkCompletion, 64)}
	for i, d := range devs {
		r := &rank{w: w, i: i, dev: d}
		var err error
		if r.pd, err = d.AllocPD(); err != nil {
			t.Fatalf("rank %d: AllocPD: %v", i, err)
		}
		if r.cq, err = d.CreateCQ(cqDepth); err != nil {
			t.Fatalf("rank %d: CreateCQ: %v", i, err)
		}
		w.ranks = append(w.ranks, r)
	}
	t.Cleanup(w.close)
	return w
}

// close destroys everything in dependency order and closes the devices;
// every teardown error fails the test.
func (w *world) close() {
	if w.closed {
		return
	}
	w.closed = true
	t := w.t
	for _, r := range w.ranks {
		for _, q := range r.qps {
			if err := q.Close(); err != nil && !errors.Is(err, rdmaio.ErrClosed) {
				t.Errorf("rank %d: close qp %d: %v", r.i, q.QPN(), err)
			}
		}
		for _, s := range r.srqs {
			if err := s.Close(); err != nil && !errors.Is(err, rdmaio.ErrClosed) {
				t.Errorf("rank %d: close srq: %v", r.i, err)
			}
		}
		for _, a := range r.ahs {
			if err := a.Close(); err != nil && !errors.Is(err, rdmaio.ErrClosed) {
				t.Errorf("rank %d: close ah: %v", r.i, err)
			}
		}
		for _, m := range r.mrs {
			if err := m.Deregister(); err != nil && !errors.Is(err, rdmaio.ErrClosed) {
				t.Errorf("rank %d: deregister: %v", r.i, err)
			}
		}
		for _, b := range r.mem {
			if err := r.pd.Free(b); err != nil {
				t.Errorf("rank %d: free: %v", r.i, err)
			}
		}
		for _, c := range append(r.cqs, r.cq) {
			if err := c.Close(); err != nil && !errors.Is(err, rdmaio.ErrClosed) {
				t.Errorf("rank %d: close cq: %v", r.i, err)
			}
		}
		if err := r.pd.Close(); err != nil && !errors.Is(err, rdmaio.ErrClosed) {
			t.Errorf("rank %d: close pd: %v", r.i, err)
		}
	}
	for _, r := range w.ranks {
		if err := r.dev.Close(); err != nil && !errors.Is(err, rdmaio.ErrClosed) {
			t.Errorf("rank %d: close device: %v", r.i, err)
		}
	}
	if lc, ok := w.f.(LeakChecker); ok {
		lc.CheckLeaks(t)
	}
}

// mem returns n bytes: ordinary Go memory, or memory from PD.Alloc when
// shared is set.
func (r *rank) buf(n int, shared bool) []byte {
	if !shared {
		return make([]byte, n)
	}
	b, err := r.pd.Alloc(n)
	if err != nil {
		r.w.t.Fatalf("rank %d: Alloc(%d): %v", r.i, n, err)
	}
	r.mem = append(r.mem, b)
	return b
}

func (r *rank) reg(b []byte, access rdmaio.Access) rdmaio.MR {
	m, err := r.pd.RegMR(b, access)
	if err != nil {
		r.w.t.Fatalf("rank %d: RegMR(%d bytes, %v): %v", r.i, len(b), access, err)
	}
	r.mrs = append(r.mrs, m)
	return m
}

// dereg deregisters m now (and forgets it for the final teardown).
func (r *rank) dereg(m rdmaio.MR) {
	if err := m.Deregister(); err != nil {
		r.w.t.Fatalf("rank %d: Deregister: %v", r.i, err)
	}
	for i, x := range r.mrs {
		if x == m {
			r.mrs = append(r.mrs[:i], r.mrs[i+1:]...)
			break
		}
	}
}

func (r *rank) newCQ() rdmaio.CQ {
	c, err := r.dev.CreateCQ(cqDepth)
	if err != nil {
		r.w.t.Fatalf("rank %d: CreateCQ: %v", r.i, err)
	}
	r.cqs = append(r.cqs, c)
	return c
}

type qpOpt struct {
	cap     rdmaio.QPCap
	cq      rdmaio.CQ // default: the rank's CQ
	srq     rdmaio.SRQ
	sigAll  bool
	access  rdmaio.Access // default: AccessRemote
	noAcc   bool          // access exactly 0
	rnrTime time.Duration // responder's MinRNRTimer
	rnr     int           // requester's RNRRetry (default infinite)
	rnrSet  bool
}

func (r *rank) qp(typ rdmaio.QPType, o qpOpt) rdmaio.QP {
	cq := o.cq
	if cq == nil {
		cq = r.cq
	}
	q, err := r.pd.CreateQP(rdmaio.QPInitAttr{Type: typ, SendCQ: cq, RecvCQ: cq, SRQ: o.srq, Cap: o.cap, SigAll: o.sigAll})
	if err != nil {
		r.w.t.Fatalf("rank %d: CreateQP(%v): %v", r.i, typ, err)
	}
	r.qps = append(r.qps, q)
	return q
}

func (w *world) modify(r *rank, q rdmaio.QP, a rdmaio.QPAttr) {
	w.t.Helper()
	if err := q.Modify(a); err != nil {
		w.t.Fatalf("rank %d: qp %d: Modify(%v): %v", r.i, q.QPN(), a.State, err)
	}
}

// connect moves qa (of rank a) and qb (of rank b) to RTS, connected to
// each other.
func (w *world) connect(a *rank, qa rdmaio.QP, oa qpOpt, b *rank, qb rdmaio.QP, ob qpOpt) {
	w.t.Helper()
	acc := func(o qpOpt) rdmaio.Access {
		if o.noAcc {
			return 0
		}
		if o.access == 0 {
			return rdmaio.AccessRemote
		}
		return o.access
	}
	rnr := func(o qpOpt) int {
		if o.rnrSet {
			return o.rnr
		}
		return rdmaio.RNRRetryInfinite
	}
	w.modify(a, qa, rdmaio.QPAttr{State: rdmaio.StateInit, Access: acc(oa)})
	w.modify(b, qb, rdmaio.QPAttr{State: rdmaio.StateInit, Access: acc(ob)})
	w.modify(a, qa, rdmaio.QPAttr{State: rdmaio.StateRTR, Dest: rdmaio.AHAttr{Addr: b.dev.Addr()}, DestQPN: qb.QPN(), MinRNRTimer: oa.rnrTime})
	w.modify(b, qb, rdmaio.QPAttr{State: rdmaio.StateRTR, Dest: rdmaio.AHAttr{Addr: a.dev.Addr()}, DestQPN: qa.QPN(), MinRNRTimer: ob.rnrTime})
	w.modify(a, qa, rdmaio.QPAttr{State: rdmaio.StateRTS, RNRRetry: rnr(oa)})
	w.modify(b, qb, rdmaio.QPAttr{State: rdmaio.StateRTS, RNRRetry: rnr(ob)})
}

// rc creates and connects an RC QP pair between ranks a and b.
func (w *world) rc(a, b int, oa, ob qpOpt) (rdmaio.QP, rdmaio.QP) {
	w.t.Helper()
	ra, rb := w.ranks[a], w.ranks[b]
	qa, qb := ra.qp(rdmaio.RC, oa), rb.qp(rdmaio.RC, ob)
	w.connect(ra, qa, oa, rb, qb, ob)
	return qa, qb
}

// ud creates a UD QP in RTS with the given Q_Key.
func (w *world) ud(r int, qkey uint32, o qpOpt) rdmaio.QP {
	w.t.Helper()
	rk := w.ranks[r]
	q := rk.qp(rdmaio.UD, o)
	w.modify(rk, q, rdmaio.QPAttr{State: rdmaio.StateInit, QKey: qkey})
	w.modify(rk, q, rdmaio.QPAttr{State: rdmaio.StateRTR})
	w.modify(rk, q, rdmaio.QPAttr{State: rdmaio.StateRTS})
	return q
}

func (w *world) ah(from, to int) rdmaio.AH {
	w.t.Helper()
	r := w.ranks[from]
	a, err := r.pd.CreateAH(rdmaio.AHAttr{Addr: w.ranks[to].dev.Addr()})
	if err != nil {
		w.t.Fatalf("rank %d: CreateAH(rank %d): %v", from, to, err)
	}
	r.ahs = append(r.ahs, a)
	return a
}

func (w *world) allCQs() []rdmaio.CQ {
	var cqs []rdmaio.CQ
	for _, r := range w.ranks {
		cqs = append(cqs, r.cq)
		cqs = append(cqs, r.cqs...)
	}
	return cqs
}

// pollAll polls every CQ once, keeping what it finds, and reports whether
// anything came.
func (w *world) pollAll() bool {
	any := false
	for _, c := range w.allCQs() {
		if n := c.Poll(w.wc); n > 0 {
			w.got[c] = append(w.got[c], w.wc[:n]...)
			any = true
		}
	}
	return any
}

// wait drives every CQ until cq has n completions and returns them. It fails
// the test after waitTimeout.
func (w *world) wait(cq rdmaio.CQ, n int) []rdmaio.WorkCompletion {
	w.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for i := 0; len(w.got[cq]) < n; i++ {
		if !w.pollAll() && i%64 == 63 {
			if time.Now().After(deadline) {
				w.t.Fatalf("timed out after %v waiting for %d completions, have %d: %v", waitTimeout, n, len(w.got[cq]), w.got[cq])
			}
			time.Sleep(10 * time.Microsecond)
		}
	}
	out := append([]rdmaio.WorkCompletion(nil), w.got[cq][:n]...)
	w.got[cq] = w.got[cq][n:]
	return out
}

// settle drives every CQ for about d (to let anything in flight arrive) and
// returns the completions of cq that came.
func (w *world) settle(cq rdmaio.CQ, d time.Duration) []rdmaio.WorkCompletion {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if !w.pollAll() {
			time.Sleep(20 * time.Microsecond)
		}
	}
	out := w.got[cq]
	w.got[cq] = nil
	return out
}

// ok fails unless every completion succeeded.
func (w *world) ok(wcs []rdmaio.WorkCompletion) {
	w.t.Helper()
	for _, c := range wcs {
		if c.Status != rdmaio.StatusSuccess {
			w.t.Fatalf("completion %d (%v) on qp %d: %v (vendor %d)", c.ID, c.Opcode, c.QPN, c.Status, c.VendorErr)
		}
	}
}

func post(t testing.TB, q rdmaio.QP, wrs ...rdmaio.SendWR) {
	t.Helper()
	if n, err := q.PostSend(wrs); err != nil || n != len(wrs) {
		t.Fatalf("qp %d: PostSend: posted %d of %d: %v", q.QPN(), n, len(wrs), err)
	}
}

func postRecv(t testing.TB, q interface {
	PostRecv([]rdmaio.RecvWR) (int, error)
}, wrs ...rdmaio.RecvWR) {
	t.Helper()
	if n, err := q.PostRecv(wrs); err != nil || n != len(wrs) {
		t.Fatalf("PostRecv: posted %d of %d: %v", n, len(wrs), err)
	}
}

func sge(m rdmaio.MR, off, n int) []rdmaio.SGE { return []rdmaio.SGE{rdmaio.MRSGE(m, off, n)} }

// fill writes a pattern that differs per seed and per position.
func fill(b []byte, seed int) {
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
}

// same fails when a and b differ, naming the first difference.
func same(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d bytes, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: first difference at byte %d of %d: %#x, want %#x", what, i, len(got), got[i], want[i])
		}
	}
}

func expectStatus(t testing.TB, wc rdmaio.WorkCompletion, id uint64, st rdmaio.Status) {
	t.Helper()
	if wc.ID != id || wc.Status != st {
		t.Fatalf("completion id %d status %v, want id %d status %v", wc.ID, wc.Status, id, st)
	}
}

func expectErr(t testing.TB, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %v, want %v", what, err, target)
	}
}

// waitCtx is a context bounded by the hang guard.
func waitCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), waitTimeout)
}

func describe(wcs []rdmaio.WorkCompletion) string {
	s := ""
	for _, c := range wcs {
		s += fmt.Sprintf("{id %d %v %v len %d qp %d} ", c.ID, c.Opcode, c.Status, c.ByteLen, c.QPN)
	}
	return s
}
