package shmem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	jiart "github.com/jiarun/jia/runtime"
	"github.com/jiarun/jia/runtime/config"
	"github.com/jiarun/jia/shmem"
	"github.com/jiarun/jia/shmem/protocol"
	"github.com/jiarun/jia/shmem/uffd"
)

// single is a one-rank runtime for the DSM (what a singleton gets).
type single struct {
	t   *testing.T
	cfg config.Config
}

func (s *single) Rank() int { return 0 }
func (s *single) Size() int { return 1 }
func (s *single) Contract() jiart.Contract {
	return jiart.Contract{Rank: 0, Size: 1, Job: "test", Secret: []byte("0123456789abcdef0123456789abcdef")}
}
func (s *single) Config() config.Config { return s.cfg }
func (s *single) Cards() []jiart.Card   { return []jiart.Card{{TCP: "127.0.0.1:1"}} }
func (s *single) Abort(code int, msg string) {
	s.t.Errorf("abort %d: %s", code, msg)
	panic("abort")
}
func (s *single) Exchange(_ context.Context, _ string, v []byte) ([][]byte, error) {
	return [][]byte{v}, nil
}

// needDSM skips the test where the DSM cannot run.
func needDSM(t *testing.T) {
	t.Helper()
	u, err := uffd.Open(uffd.FeaturePagefaultFlagWP | uffd.FeatureMissingShmem | uffd.FeatureWPHugetlbfsShmem)
	if err != nil {
		t.Skipf("no userfaultfd here: %v", err)
	}
	defer u.Close()
	if u.Features()&uffd.FeatureWPHugetlbfsShmem == 0 {
		t.Skip("this kernel cannot write-protect shared memory with userfaultfd")
	}
}

func start(t *testing.T) *shmem.DSM {
	t.Helper()
	needDSM(t)
	cfg := testConfig(false)
	d, err := shmem.Start(context.Background(), &single{t: t, cfg: cfg})
	if errors.Is(err, shmem.ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	return d
}

// One rank: its pager serves the faults of home pages (zeros at first),
// locks and barriers complete, and the statistics count the faults.
func TestSingleRankRegion(t *testing.T) {
	d := start(t)
	r, err := d.Alloc(3*shmem.PageSize+5, shmem.OnRank(0))
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != 4*shmem.PageSize {
		t.Fatalf("region of %d bytes", r.Len())
	}
	a := shmem.Slice[float64](r)
	if a[10] != 0 {
		t.Fatalf("fresh memory reads %v", a[10])
	}
	if err := d.Lock(3); err != nil {
		t.Fatal(err)
	}
	for i := range a {
		a[i] = float64(i)
	}
	if err := d.Unlock(3); err != nil {
		t.Fatal(err)
	}
	if err := d.Barrier(); err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if a[i] != float64(i) {
			t.Fatalf("a[%d] = %v", i, a[i])
		}
	}
	s, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.HomeFaults == 0 || s.Locks != 1 || s.Barriers != 1 {
		t.Fatalf("stats %+v", s)
	}
	r2, err := d.Alloc(100, shmem.Placement{})
	if err != nil {
		t.Fatal(err)
	}
	if r2.Addr() != r.Addr()+uintptr(r.Len()) {
		t.Fatalf("second region at %#x, first at %#x+%#x", r2.Addr(), r.Addr(), r.Len())
	}
	if err := d.Free(r); err != nil {
		t.Fatal(err)
	}
	if err := d.Free(r); !errors.Is(err, shmem.ErrFreed) || !strings.Contains(err.Error(), "rank 0") {
		t.Fatalf("second Free: %v", err)
	}
	if _, err := shmem.SliceAt[int32](r, 0, 1); !errors.Is(err, shmem.ErrFreed) {
		t.Fatalf("SliceAt of a freed region: %v", err)
	}
	shmem.Slice[byte](r2)[7] = 7
	if err := d.Wait(); err != nil {
		t.Fatal(err)
	}
}

func TestSingleRankBadCalls(t *testing.T) {
	d := start(t)
	cases := []struct {
		name string
		err  error
		want error
		text string
	}{
		{"unlock not held", d.Unlock(4), protocol.ErrLockNotHeld, "shmem: rank 0: Unlock(4): lock not held"},
		{"negative lock", d.Lock(-1), protocol.ErrBadID, "Lock(-1)"},
		{"size 0", errOf(d.Alloc(0, shmem.Placement{})), shmem.ErrSize, "shmem: rank 0: Alloc(0 bytes)"},
		{"too large", errOf(d.Alloc(65*1024*1024, shmem.Placement{})), shmem.ErrSize, "dsm.max_alloc"},
		{"bad placement", errOf(d.Alloc(100, shmem.OnRank(3))), protocol.ErrPlacement, "rank 3 outside 0..0"},
		{"bad explicit", errOf(d.Alloc(2*shmem.PageSize, shmem.Explicit(1, 0))), protocol.ErrPlacement, "1 homes for 2 blocks"},
		{"free of nil", d.Free(nil), nil, "Free()"},
	}
	for _, c := range cases {
		if c.err == nil || (c.want != nil && !errors.Is(c.err, c.want)) || !strings.Contains(c.err.Error(), c.text) {
			t.Errorf("%s: %v, want %v containing %q", c.name, c.err, c.want, c.text)
		}
	}
	if err := d.Lock(1); err != nil {
		t.Fatal(err)
	}
	if err := d.Lock(1); !errors.Is(err, protocol.ErrLockHeld) {
		t.Errorf("relock: %v", err)
	}
	if err := d.Barrier(); !errors.Is(err, protocol.ErrBarrierInCS) || !strings.Contains(err.Error(), "Barrier()") {
		t.Errorf("barrier in a critical section: %v", err)
	}
	if err := d.Unlock(1); err != nil {
		t.Fatal(err)
	}
	// The failed allocations took no address space.
	r, err := d.Alloc(1, shmem.Placement{})
	if err != nil {
		t.Fatal(err)
	}
	shmem.Slice[byte](r)[0] = 1
}

func errOf(_ *shmem.Region, err error) error { return err }

// With one P, 64 goroutines fault at once and copy() into and out of DSM
// memory: the pager, another process, serves every fault.
func TestSingleRankManyFaultsOneP(t *testing.T) {
	d := start(t)
	const pages = 130
	r, err := d.Alloc(pages*shmem.PageSize, shmem.Placement{})
	if err != nil {
		t.Fatal(err)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := 2 * g
			if got := r.Page(p)[17]; got != 0 {
				errs <- fmt.Sprintf("goroutine %d read %d", g, got)
				return
			}
			src := bytes.Repeat([]byte{byte(g + 1)}, 64)
			copy(r.Bytes()[(p+1)*shmem.PageSize-32:], src)
			out := make([]byte, 64)
			copy(out, r.Bytes()[(p+1)*shmem.PageSize-32:])
			if !bytes.Equal(out, src) {
				errs <- fmt.Sprintf("goroutine %d copied back %v", g, out[:4])
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("deadlock: the goroutines did not finish")
	}
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
