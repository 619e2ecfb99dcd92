package match

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// A script step: "post ctx src tag id", "arrive ctx src tag id",
// "probe ctx src tag", "cancel ctx - - id" or "direct ctx src tag"; want is what the step must report: the id it
// matched ("-" for nothing, and for a probe "id src tag").
type step struct {
	do   string
	want string
}

func runScript(t *testing.T, steps []step) {
	t.Helper()
	var e Engine[int, int]
	for i, s := range steps {
		var op string
		var ctx uint32
		var src, tag int32
		var id int
		f := strings.Fields(s.do)
		op = f[0]
		fmt.Sscan(f[1], &ctx)
		fmt.Sscan(f[2], &src)
		fmt.Sscan(f[3], &tag)
		if len(f) > 4 {
			fmt.Sscan(f[4], &id)
		}
		got := "-"
		switch op {
		case "post":
			if m, ms, mt, ok := e.Post(ctx, src, tag, id); ok {
				got = fmt.Sprintf("%d %d %d", m, ms, mt)
			}
		case "arrive":
			if r, ok := e.Arrive(ctx, src, tag); ok {
				got = fmt.Sprint(r)
			} else {
				e.Unexpected(ctx, src, tag, id)
			}
		case "probe":
			if m, ms, mt, ok := e.Probe(ctx, src, tag); ok {
				got = fmt.Sprintf("%d %d %d", m, ms, mt)
			}
		case "cancel":
			got = fmt.Sprint(e.Cancel(ctx, id))
		case "direct":
			got = fmt.Sprint(e.Direct(ctx, src, tag))
		default:
			t.Fatalf("step %d: bad op %q", i, op)
		}
		if got != s.want {
			t.Fatalf("step %d %q: got %q, want %q", i, s.do, got, s.want)
		}
	}
}

// The tests are named after the rule of the MPI standard (MPI-4.0) they
// check.
func TestRules(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
	}{
		{"MPI-4.0 §3.2.4 envelope: source, tag and context must all match", []step{
			{"arrive 0 1 5 100", "-"},
			{"post 0 2 5 1", "-"}, // other source
			{"post 0 1 6 2", "-"}, // other tag
			{"post 1 1 5 3", "-"}, // other context
			{"post 0 1 5 4", "100 1 5"},
			{"arrive 0 2 5 101", "1"},
			{"arrive 0 1 6 102", "2"},
			{"arrive 1 1 5 103", "3"},
		}},
		{"MPI-4.0 §3.2.4 AnySource matches any source", []step{
			{"post 0 -1 7 1", "-"},
			{"arrive 0 3 7 100", "1"},
			{"arrive 0 2 7 101", "-"},
			{"post 0 -1 7 2", "101 2 7"},
		}},
		{"MPI-4.0 §3.2.4 AnyTag matches any tag", []step{
			{"post 0 1 -1 1", "-"},
			{"arrive 0 1 42 100", "1"},
			{"arrive 0 1 0 101", "-"},
			{"post 0 1 -1 2", "101 1 0"},
		}},
		{"MPI-4.0 §3.2.4 both wildcards match anything in the context only", []step{
			{"arrive 1 4 9 100", "-"},
			{"post 0 -1 -1 1", "-"},
			{"arrive 0 4 9 101", "1"},
			{"post 1 -1 -1 2", "100 4 9"},
		}},
		{"MPI-4.0 §3.5 non-overtaking: messages from one sender match in order", []step{
			{"arrive 0 1 5 100", "-"},
			{"arrive 0 1 5 101", "-"},
			{"arrive 0 1 5 102", "-"},
			{"post 0 1 5 1", "100 1 5"},
			{"post 0 1 5 2", "101 1 5"},
			{"post 0 1 5 3", "102 1 5"},
		}},
		{"MPI-4.0 §3.5 non-overtaking with AnyTag: earliest message of the sender first", []step{
			{"arrive 0 1 5 100", "-"},
			{"arrive 0 1 6 101", "-"},
			{"post 0 1 -1 1", "100 1 5"},
			{"post 0 1 -1 2", "101 1 6"},
		}},
		{"MPI-4.0 §3.5 non-overtaking with AnySource: earliest arrival first", []step{
			{"arrive 0 2 5 100", "-"},
			{"arrive 0 1 5 101", "-"},
			{"arrive 0 2 5 102", "-"},
			{"post 0 -1 5 1", "100 2 5"},
			{"post 0 -1 5 2", "101 1 5"},
			{"post 0 -1 5 3", "102 2 5"},
		}},
		{"MPI-4.0 §3.5 a specific receive may take a later message of another tag", []step{
			{"arrive 0 1 5 100", "-"},
			{"arrive 0 1 6 101", "-"},
			{"post 0 1 6 1", "101 1 6"},
			{"post 0 1 5 2", "100 1 5"},
		}},
		{"MPI-4.0 §3.5 receives posted in order match in order", []step{
			{"post 0 1 5 1", "-"},
			{"post 0 1 5 2", "-"},
			{"arrive 0 1 5 100", "1"},
			{"arrive 0 1 5 101", "2"},
		}},
		{"MPI-4.0 §3.5 an earlier wildcard receive is matched before a later specific one", []step{
			{"post 0 -1 5 1", "-"},
			{"post 0 1 5 2", "-"},
			{"arrive 0 1 5 100", "1"},
			{"arrive 0 1 5 101", "2"},
		}},
		{"MPI-4.0 §3.5 an earlier specific receive is matched before a later wildcard one", []step{
			{"post 0 1 5 1", "-"},
			{"post 0 -1 -1 2", "-"},
			{"arrive 0 1 5 100", "1"},
			{"arrive 0 1 5 101", "2"},
		}},
		{"MPI-4.0 §3.5 a message skips posted receives it does not match", []step{
			{"post 0 1 7 1", "-"},
			{"post 0 -1 5 2", "-"},
			{"arrive 0 1 5 100", "2"},
			{"arrive 0 1 7 101", "1"},
		}},
		{"MPI-4.0 §3.8.1 probe reports the message a receive would take, without taking it", []step{
			{"arrive 0 2 5 100", "-"},
			{"arrive 0 1 6 101", "-"},
			{"probe 0 -1 -1", "100 2 5"},
			{"probe 0 -1 -1", "100 2 5"},
			{"probe 0 1 -1", "101 1 6"},
			{"probe 0 3 -1", "-"},
			{"post 0 -1 6 1", "101 1 6"},
			{"probe 0 -1 -1", "100 2 5"},
			{"post 0 -1 -1 2", "100 2 5"},
			{"probe 0 -1 -1", "-"},
		}},
		{"MPI-4.0 §3.8.4 a canceled receive no longer matches", []step{
			{"post 0 1 5 1", "-"},
			{"post 0 1 5 2", "-"},
			{"cancel 0 0 0 1", "true"},
			{"cancel 0 0 0 1", "false"},
			{"arrive 0 1 5 100", "2"},
			{"arrive 0 1 5 101", "-"},
		}},
		{"MPI-4.0 §7.1.2 contexts: traffic on one never matches another", []step{
			{"post 0 -1 -1 1", "-"},
			{"arrive 2 0 0 100", "-"},
			{"arrive 0 0 0 101", "1"},
			{"probe 0 -1 -1", "-"},
			{"probe 2 -1 -1", "100 0 0"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runScript(t, tc.steps) })
	}
}

// ref is the reference matcher: two slices scanned from the front.
type ref struct {
	posted []refEntry
	unexp  []refEntry
}

type refEntry struct {
	ctx      uint32
	src, tag int32
	id       int
}

func (r *ref) post(ctx uint32, src, tag int32, id int) (refEntry, bool) {
	for i, m := range r.unexp {
		if m.ctx == ctx && (src == AnySource || src == m.src) && (tag == AnyTag || tag == m.tag) {
			r.unexp = append(r.unexp[:i], r.unexp[i+1:]...)
			return m, true
		}
	}
	r.posted = append(r.posted, refEntry{ctx, src, tag, id})
	return refEntry{}, false
}

func (r *ref) arrive(ctx uint32, src, tag int32, id int) (int, bool) {
	for i, p := range r.posted {
		if p.ctx == ctx && (p.src == AnySource || p.src == src) && (p.tag == AnyTag || p.tag == tag) {
			r.posted = append(r.posted[:i], r.posted[i+1:]...)
			return p.id, true
		}
	}
	r.unexp = append(r.unexp, refEntry{ctx, src, tag, id})
	return 0, false
}

func (r *ref) probe(ctx uint32, src, tag int32) (refEntry, bool) {
	for _, m := range r.unexp {
		if m.ctx == ctx && (src == AnySource || src == m.src) && (tag == AnyTag || tag == m.tag) {
			return m, true
		}
	}
	return refEntry{}, false
}

func (r *ref) cancel(ctx uint32, id int) bool {
	for i, p := range r.posted {
		if p.ctx == ctx && p.id == id {
			r.posted = append(r.posted[:i], r.posted[i+1:]...)
			return true
		}
	}
	return false
}

// TestAgainstReference drives the engine and the reference matcher with
// the same random operations (few sources, tags and contexts, so that
// wildcards and queues interact a lot) and requires identical answers.
func TestAgainstReference(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 99))
		var e Engine[int, int]
		var r ref
		nsrc := 1 + rng.IntN(6)
		var posted []int // ids possibly posted, for cancel
		for i := 0; i < 5000; i++ {
			ctx := uint32(rng.IntN(2))
			src := int32(rng.IntN(nsrc))
			tag := int32(rng.IntN(3))
			id := i + 1
			switch k := rng.IntN(10); {
			case k < 4: // post, with wildcards a third of the time each
				if rng.IntN(3) == 0 {
					src = AnySource
				}
				if rng.IntN(3) == 0 {
					tag = AnyTag
				}
				m, ms, mt, ok := e.Post(ctx, src, tag, id)
				rm, rok := r.post(ctx, src, tag, id)
				if ok != rok || (ok && (m != rm.id || ms != rm.src || mt != rm.tag)) {
					t.Fatalf("seed %d op %d post(%d,%d,%d): got %v %d %d %d, want %v %+v", seed, i, ctx, src, tag, ok, m, ms, mt, rok, rm)
				}
				if !ok {
					posted = append(posted, id)
				}
			case k < 8:
				got, ok := e.Arrive(ctx, src, tag)
				if !ok {
					e.Unexpected(ctx, src, tag, id)
				}
				want, rok := r.arrive(ctx, src, tag, id)
				if ok != rok || got != want {
					t.Fatalf("seed %d op %d arrive(%d,%d,%d): got %v %d, want %v %d", seed, i, ctx, src, tag, ok, got, rok, want)
				}
			case k < 9:
				if rng.IntN(2) == 0 {
					src = AnySource
				}
				if rng.IntN(2) == 0 {
					tag = AnyTag
				}
				m, ms, mt, ok := e.Probe(ctx, src, tag)
				rm, rok := r.probe(ctx, src, tag)
				if ok != rok || (ok && (m != rm.id || ms != rm.src || mt != rm.tag)) {
					t.Fatalf("seed %d op %d probe: got %v %d, want %v %+v", seed, i, ok, m, rok, rm)
				}
			default:
				if len(posted) == 0 {
					continue
				}
				j := rng.IntN(len(posted))
				id := posted[j]
				posted = append(posted[:j], posted[j+1:]...)
				for c := uint32(0); c < 2; c++ {
					if a, b := e.Cancel(c, id), r.cancel(c, id); a != b {
						t.Fatalf("seed %d op %d cancel(%d, %d): got %v, want %v", seed, i, c, id, a, b)
					}
				}
			}
		}
		for c := uint32(0); c < 2; c++ {
			p, u := e.Len(c)
			rp, ru := 0, 0
			for _, x := range r.posted {
				if x.ctx == c {
					rp++
				}
			}
			for _, x := range r.unexp {
				if x.ctx == c {
					ru++
				}
			}
			if p != rp || u != ru {
				t.Fatalf("seed %d ctx %d: queue lengths %d/%d, want %d/%d", seed, c, p, u, rp, ru)
			}
		}
	}
}

func TestDrain(t *testing.T) {
	var e Engine[int, int]
	e.Post(3, 1, 1, 1)
	e.Post(3, AnySource, 1, 2)
	e.Unexpected(3, 0, 0, 100)
	var rs, ms []int
	e.Drain(3, func(r int) { rs = append(rs, r) }, func(m int) { ms = append(ms, m) })
	if len(rs) != 2 || len(ms) != 1 {
		t.Fatalf("drained %v %v", rs, ms)
	}
	if p, u := e.Len(3); p != 0 || u != 0 {
		t.Fatalf("left %d %d", p, u)
	}
	if _, ok := e.Arrive(3, 1, 1); ok {
		t.Fatal("drained receive still matches")
	}
}

func TestSteadyStateDoesNotAllocate(t *testing.T) {
	var e Engine[*int, *int]
	x := new(int)
	step := func() {
		e.Post(0, 1, 5, x)
		if _, ok := e.Arrive(0, 1, 5); !ok {
			panic("no match")
		}
		if _, ok := e.Arrive(0, 2, 5); !ok {
			e.Unexpected(0, 2, 5, x)
		}
		e.Post(0, AnySource, AnyTag, x)
	}
	step()
	if n := testing.AllocsPerRun(1000, step); n != 0 {
		t.Fatalf("%v allocations per step", n)
	}
}

func BenchmarkPostArrive(b *testing.B) {
	var e Engine[*int, *int]
	x := new(int)
	for b.Loop() {
		e.Post(0, 1, 5, x)
		e.Arrive(0, 1, 5)
	}
}

func BenchmarkAnySourceUnexpected64(b *testing.B) {
	var e Engine[*int, *int]
	x := new(int)
	for s := int32(0); s < 64; s++ {
		e.Unexpected(0, s, 1, x)
	}
	for b.Loop() {
		e.Post(0, AnySource, AnyTag, x)
		e.Unexpected(0, 63, 1, x)
	}
}

// TestDirect: a receive may take its next message itself (Direct) only
// while its context has no posted receive and no unexpected message it
// would match.
func TestDirect(t *testing.T) {
	runScript(t, []step{
		{"direct 0 1 5", "true"},
		{"direct 7 1 -1", "true"}, // a context never used
		{"arrive 0 1 6 10", "-"},  // unexpected: tag 6 from 1
		{"direct 0 1 5", "true"},  // another tag
		{"direct 0 2 6", "true"},  // another source
		{"direct 1 1 6", "true"},  // another context
		{"direct 0 1 6", "false"}, // it would take the queued one
		{"direct 0 1 -1", "false"},
		{"post 0 1 6 1", "10 1 6"},
		{"direct 0 1 -1", "true"},
		{"post 0 3 9 2", "-"},     // posted on ctx 0, from another source
		{"direct 0 1 5", "false"}, // could match a message first (order)
		{"direct 1 1 5", "true"},
		{"cancel 0 0 0 2", "true"},
		{"direct 0 1 5", "true"},
		{"post 0 -1 -1 3", "-"},
		{"direct 0 1 5", "false"},
	})
}
