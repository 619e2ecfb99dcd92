package board

import (
	"errors"
	"math/rand"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/jiarun/jia/shmem/internal/backoff"
)

func TestStepLastArrivalStartsTheNextGeneration(t *testing.T) {
	var w uint64
	var a Arrival
	for i := 0; i < 2; i++ {
		w, a = Step(w, 3, false)
		if a.Last || a.Gen != 0 {
			t.Fatalf("arrival %d: %+v", i, a)
		}
	}
	w, a = Step(w, 3, false)
	if !a.Last || a.Dirty || a.Gen != 0 {
		t.Fatalf("last arrival: %+v", a)
	}
	if g, d := Outcome(w); g != 1 || d {
		t.Fatalf("after: generation %d, dirty %v", g, d)
	}
}

func TestStepOneDirtyArrivalMakesTheOutcomeDirty(t *testing.T) {
	for dirtyAt := 0; dirtyAt < 4; dirtyAt++ {
		var w uint64
		var a Arrival
		for i := 0; i < 4; i++ {
			w, a = Step(w, 4, i == dirtyAt)
		}
		if !a.Last || !a.Dirty {
			t.Fatalf("dirty arrival %d: last arrival %+v", dirtyAt, a)
		}
		if _, d := Outcome(w); !d {
			t.Fatalf("dirty arrival %d: outcome clean", dirtyAt)
		}
		// The outcome survives the next generation's arrivals until it
		// completes, and the new generation starts clean.
		w, _ = Step(w, 4, false)
		if g, d := Outcome(w); g != 1 || !d {
			t.Fatalf("dirty arrival %d: after one more arrival: generation %d, dirty %v", dirtyAt, g, d)
		}
		for i := 0; i < 3; i++ {
			w, a = Step(w, 4, false)
		}
		if !a.Last || a.Dirty {
			t.Fatalf("dirty arrival %d: next generation: %+v", dirtyAt, a)
		}
	}
}

func TestStepOneRank(t *testing.T) {
	w, a := Step(0, 1, true)
	if !a.Last || !a.Dirty {
		t.Fatalf("%+v", a)
	}
	if g, d := Outcome(w); g != 1 || !d {
		t.Fatalf("generation %d, dirty %v", g, d)
	}
}

// TestRandomizedAgreement runs generations of barriers among goroutines,
// each arriving dirty at random, and checks that every rank learns the
// same outcome, the right one, and that nobody leaves a clean generation
// before everyone arrived. After a dirty one the goroutines meet in a
// full barrier of their own, as the ranks do through their pagers.
func TestRandomizedAgreement(t *testing.T) {
	const n, gens = 4, 300
	b, err := Create(n)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := b.Barrier()
	var dirty [gens][n]bool
	rng := rand.New(rand.NewSource(1))
	for g := range dirty {
		for r := range dirty[g] {
			dirty[g][r] = rng.Intn(8) == 0
		}
	}
	var arrived [gens]int32
	var mu sync.Mutex
	full := newCyclic(n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			p := backoff.Policy{Yield: time.Duration(r) * 20 * time.Microsecond}
			for g := 0; g < gens; g++ {
				mu.Lock()
				arrived[g]++
				mu.Unlock()
				a, err := c.Arrive(dirty[g][r])
				if err != nil {
					errs <- err
					return
				}
				if int(a.Gen) != g {
					t.Errorf("rank %d: arrived at generation %d, want %d", r, a.Gen, g)
				}
				out := a.Dirty
				if !a.Last {
					if out, err = c.Await(a.Gen, p, nil); err != nil {
						errs <- err
						return
					}
				}
				want := false
				for _, d := range dirty[g] {
					want = want || d
				}
				if out != want {
					t.Errorf("rank %d: generation %d: outcome dirty %v, want %v", r, g, out, want)
				}
				if out {
					full.wait()
					continue
				}
				mu.Lock()
				if arrived[g] != n {
					t.Errorf("rank %d left generation %d after %d arrivals", r, g, arrived[g])
				}
				mu.Unlock()
			}
		}(r)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestBreakWakesWaiters(t *testing.T) {
	b, err := Create(2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := b.Wait()
	a, err := c.Arrive(false)
	if err != nil || a.Last {
		t.Fatalf("%+v, %v", a, err)
	}
	done := make(chan error)
	go func() {
		_, err := c.Await(a.Gen, backoff.Policy{}, nil)
		done <- err
	}()
	b.Break()
	if err := <-done; !errors.Is(err, ErrBroken) {
		t.Fatalf("wait after Break: %v", err)
	}
	if _, err := c.Arrive(false); !errors.Is(err, ErrBroken) {
		t.Fatalf("arrival after Break: %v", err)
	}
}

func TestAwaitGivesUpWhenStopSays(t *testing.T) {
	b, err := Create(2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := b.Barrier()
	a, _ := c.Arrive(false)
	stop := errors.New("the pager is gone")
	if _, err := c.Await(a.Gen, backoff.Policy{}, func() error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("Await: %v", err)
	}
}

func TestOpenSharesTheBoard(t *testing.T) {
	b, err := Create(2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	o, err := Open(os.Getpid(), b.FD(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if _, err := o.Barrier().Arrive(false); err != nil {
		t.Fatal(err)
	}
	a, err := b.Barrier().Arrive(false)
	if err != nil || !a.Last {
		t.Fatalf("%+v, %v", a, err)
	}
	o.SetSlot(1, 7, 42)
	if g, h, ok := b.Slot(1); !ok || g != 7 || h != 42 {
		t.Fatalf("slot: %d %d %v", g, h, ok)
	}
	if _, err := Open(os.Getpid(), b.FD(), 3); err == nil {
		t.Fatal("opened a board of 2 ranks as one of 3")
	}
}

func TestGoneFindsAnEndedProgram(t *testing.T) {
	b, err := Create(3)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if r := b.Gone(); r != -1 {
		t.Fatalf("Gone with no process recorded: %d", r)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	b.SetPid(0, os.Getpid())
	b.SetPid(2, cmd.Process.Pid)
	if r := b.Gone(); r != 2 {
		t.Fatalf("Gone: %d, want 2", r)
	}
}

// cyclic is a reusable barrier among n goroutines.
type cyclic struct {
	mu    sync.Mutex
	cond  *sync.Cond
	n     int
	count int
	gen   int
}

func newCyclic(n int) *cyclic {
	c := &cyclic{n: n}
	c.cond = sync.NewCond(&c.mu)
	return c
}

func (c *cyclic) wait() {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.gen
	if c.count++; c.count == c.n {
		c.count = 0
		c.gen++
		c.cond.Broadcast()
		return
	}
	for g == c.gen {
		c.cond.Wait()
	}
}

// A waiter learns of a dirty arrival at once, before the last arrival.
func TestDirtyArrivalSettlesTheWaiters(t *testing.T) {
	b, err := Create(3)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := b.Barrier()
	a, _ := c.Arrive(false)
	done := make(chan bool)
	go func() {
		d, err := c.Await(a.Gen, backoff.Policy{}, nil)
		if err != nil {
			t.Error(err)
		}
		done <- d
	}()
	if a2, _ := c.Arrive(true); a2.Last {
		t.Fatal("the second of three arrivals completed the generation")
	}
	if d := <-done; !d {
		t.Fatal("the waiter's outcome is clean after a dirty arrival")
	}
	if g, _ := c.Gen(); g != a.Gen {
		t.Fatalf("generation %d completed with two of three arrivals", g)
	}
}
