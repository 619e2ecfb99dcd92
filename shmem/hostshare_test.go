package shmem_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/runtime/config"
	"github.com/jiarun/jia/shmem"
)

// The ranks of a one-host job with dsm.host_share share one copy of every
// region: the tests below run the programs of the page-fault path's tests
// in that mode, and check that nothing goes through the pagers' protocol.

// sharedRanks runs fn on n ranks that share the host's memory; it fails
// the test if a rank does not.
func sharedRanks(t *testing.T, n int, cfg config.Config, fn func(d *shmem.DSM) error) {
	t.Helper()
	ranksWith(t, n, cfg, func(d *shmem.DSM) error {
		if !d.HostShared() {
			return errors.New("the ranks do not share the host's memory")
		}
		return fn(d)
	})
}

// noProtocol fails unless d's pager took no fault, fetched, sent or
// invalidated no page and sent no diff.
func noProtocol(d *shmem.DSM) error {
	s, err := d.Stats()
	if err != nil {
		return err
	}
	if s.ReadFaults+s.WriteFaults+s.HomeFaults+s.PagesFetched+s.Prefetched+s.PagesServed+s.DiffMsgs+s.DiffPages+s.Invalidations+s.Evictions != 0 {
		return fmt.Errorf("the pager took part in the memory's coherence: %+v", s)
	}
	return nil
}

// Counters incremented under locks are exact, values written before a
// barrier are seen after it, and a consumer sees every item a producer
// published under a lock (once a condition variable says all are), all
// with no fault, fetch or diff.
func TestHostShareLocksBarriersProducerConsumer(t *testing.T) {
	const n, iters, items = 3, 30, 200
	sharedRanks(t, n, testConfig(true), func(d *shmem.DSM) error {
		r, err := countersAndSlots(d, n, iters)
		if err != nil {
			return err
		}
		me := d.Rank()

		// Producer and consumers: rank 0 writes items into a queue homed
		// on rank 1 and publishes their count under lock 9.
		q, err := d.Alloc((items+1)*8, shmem.OnRank(1))
		if err != nil {
			return err
		}
		qs := shmem.Slice[int64](q)
		if me == 0 {
			for i := 1; i <= items; i++ {
				qs[i] = int64(i * i)
				if err := d.Lock(9); err != nil {
					return err
				}
				qs[0] = int64(i)
				if err := d.Unlock(9); err != nil {
					return err
				}
			}
			if err := d.SetCV(4); err != nil { // all produced
				return err
			}
		} else {
			if err := d.WaitCV(4); err != nil {
				return err
			}
			for seen := int64(0); seen < items; {
				if err := d.Lock(9); err != nil {
					return err
				}
				count := qs[0]
				if err := d.Unlock(9); err != nil {
					return err
				}
				for ; seen < count; seen++ {
					if got := qs[seen+1]; got != (seen+1)*(seen+1) {
						return fmt.Errorf("item %d is %d", seen+1, got)
					}
				}
			}
		}
		if err := d.Barrier(); err != nil {
			return err
		}
		if err := noProtocol(d); err != nil {
			return err
		}
		if err := d.Free(q); err != nil {
			return err
		}
		return d.Free(r)
	})
}

// A store of one rank is seen by another's load after a barrier, with no
// page fetched; the region's pages exist once on the host: every rank
// maps the same memfd, which holds each written page once.
func TestHostShareOneCopy(t *testing.T) {
	const n, pages = 2, 64
	var mu sync.Mutex
	inodes := map[uint64]int{}
	sharedRanks(t, n, testConfig(true), func(d *shmem.DSM) error {
		r, err := d.Alloc(pages*shmem.PageSize, shmem.OnRank(0))
		if err != nil {
			return err
		}
		b := r.Bytes()
		if d.Rank() == 1 {
			for p := 0; p < pages; p++ {
				b[p*shmem.PageSize+7] = byte(p + 1)
			}
		}
		if err := d.Barrier(); err != nil {
			return err
		}
		for p := 0; p < pages; p++ {
			if got := b[p*shmem.PageSize+7]; got != byte(p+1) {
				return fmt.Errorf("page %d reads %d after the barrier", p, got)
			}
		}
		var st unix.Stat_t
		if err := unix.Fstat(shmem.SharedFD(d), &st); err != nil {
			return err
		}
		mu.Lock()
		inodes[st.Ino]++
		mu.Unlock()
		if got := st.Blocks * 512; got != pages*int64(shmem.PageSize) {
			return fmt.Errorf("the shared memfd holds %d bytes after %d pages were written", got, pages)
		}
		if err := noProtocol(d); err != nil {
			return err
		}
		if err := d.Barrier(); err != nil {
			return err
		}
		if err := d.Free(r); err != nil {
			return err
		}
		// Free released the host's copy.
		if err := d.Wait(); err != nil {
			return err
		}
		if err := unix.Fstat(shmem.SharedFD(d), &st); err != nil {
			return err
		}
		if st.Blocks != 0 {
			return fmt.Errorf("the shared memfd holds %d bytes after Free", st.Blocks*512)
		}
		return nil
	})
	if len(inodes) != 1 {
		t.Errorf("the ranks map %d memfds, want 1: %v", len(inodes), inodes)
	}
}

// A region of 4 GiB of which a few pages are touched takes those pages
// only.
func TestHostShareSparseRegion(t *testing.T) {
	const size = 4 << 30
	cfg := testConfig(true)
	cfg.DSM.MaxAlloc = size
	sharedRanks(t, 2, cfg, func(d *shmem.DSM) error {
		r, err := d.Alloc(size, shmem.BlockCyclic(16, 0))
		if err != nil {
			return err
		}
		b := r.Bytes()
		stride := size / 8
		me := d.Rank()
		for k := me; k < 8; k += 2 {
			b[k*stride+me] = byte(k + 1)
		}
		if err := d.Barrier(); err != nil {
			return err
		}
		for k := 0; k < 8; k++ {
			if got := b[k*stride+k%2]; got != byte(k+1) {
				return fmt.Errorf("byte at %d is %d", k*stride+k%2, got)
			}
		}
		var st unix.Stat_t
		if err := unix.Fstat(shmem.SharedFD(d), &st); err != nil {
			return err
		}
		if got := st.Blocks * 512; got != 8*int64(shmem.PageSize) {
			return fmt.Errorf("the shared memfd holds %d bytes after 8 pages were touched", got)
		}
		if err := d.Barrier(); err != nil {
			return err
		}
		return d.Free(r)
	})
}

// Bad input still gets its errors: a mismatched Alloc on every rank (and
// the DSM works on), a placement on a rank that does not exist, a second
// Free, a view of a freed region.
func TestHostShareBadInput(t *testing.T) {
	sharedRanks(t, 2, testConfig(true), func(d *shmem.DSM) error {
		r, err := mismatchThenWorks(d)
		if err != nil {
			return err
		}
		if _, err := d.Alloc(100, shmem.OnRank(2)); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("rank %d", d.Rank())) {
			return fmt.Errorf("Alloc on rank 2 of 2: %v", err)
		}
		if err := d.Free(r); err != nil {
			return err
		}
		if err := d.Free(r); !errors.Is(err, shmem.ErrFreed) {
			return fmt.Errorf("second Free: %v", err)
		}
		if _, err := shmem.SliceAt[int32](r, 0, 1); !errors.Is(err, shmem.ErrFreed) {
			return fmt.Errorf("SliceAt of a freed region: %v", err)
		}
		return nil
	})
}

// HostShare off keeps a copy per rank, on the page-fault path.
func TestHostShareOff(t *testing.T) {
	ranks(t, 2, func(d *shmem.DSM) error {
		if d.HostShared() {
			return errors.New("the ranks share the host's memory with dsm.host_share off")
		}
		r, err := d.Alloc(shmem.PageSize, shmem.OnRank(0))
		if err != nil {
			return err
		}
		if err := d.Barrier(); err != nil {
			return err
		}
		if v := shmem.Slice[int64](r)[0]; v != 0 { // a fault
			return fmt.Errorf("fresh memory reads %d", v)
		}
		s, err := d.Stats()
		if err != nil {
			return err
		}
		if s.ReadFaults == 0 {
			return fmt.Errorf("no fault: %+v", s)
		}
		return d.Free(r)
	})
}
