package shmem_test

import (
	"fmt"
	"testing"

	"github.com/jiarun/jia/shmem"
)

// A rank that keeps a lock after its release takes it again by a claim in
// the call queue, without waiting for its pager, and writes a home page
// that stays writable (nobody else held a copy of it as far as its pager
// knows) but that the other rank has read directly meanwhile. Its pager
// learns of that read only when it collects the direct reads, which it
// must do after it stepped the claimed Lock: the write then belongs to the
// lock's scope, the release that the other rank's acquire recalls names
// the page, and the other rank's acquire invalidates its copy. Collected
// before the Lock, the page was noticed in the interval before the hold,
// and the other rank read its stale copy under the lock (a lost update).
//
// Each round uses a region of its own, so that no prefetch or refetch of
// an earlier round's pages tells the home about the read before the claim.
func TestClaimedKeptLockCollectsDirectReadsInItsScope(t *testing.T) {
	const n, rounds, id = 2, 12, 1 // lock 1 is managed by rank 1 and kept by rank 0
	ranks(t, n, func(d *shmem.DSM) error {
		me := d.Rank()
		posted := shmem.PostedLocks(d)
		var lost error
		for round := 0; round < rounds; round++ {
			r, err := d.Alloc(shmem.PageSize, shmem.OnRank(0))
			if err != nil {
				return err
			}
			c := shmem.Slice[int64](r)
			first, second := int64(2*round+1), int64(2*round+2)
			if me == 0 {
				// Granted twice in a row with nobody waiting: kept here.
				for k := 0; k < 2; k++ {
					if err := d.Lock(id); err != nil {
						return err
					}
					c[0] = first
					if err := d.Unlock(id); err != nil {
						return err
					}
				}
			}
			if err := d.Wait(); err != nil {
				return err
			}
			if me == 1 {
				// Read without the lock: a copy of the home's page, read
				// directly where the ranks share a host.
				if v := c[0]; v != 0 && v != first && lost == nil {
					lost = fmt.Errorf("round %d: read %d without the lock, want 0 or %d", round, v, first)
				}
			}
			if err := d.Wait(); err != nil {
				return err
			}
			if me == 0 {
				if err := d.Lock(id); err != nil { // a claim, if the pager offered the lock
					return err
				}
				c[0] = second
				if err := d.Unlock(id); err != nil {
					return err
				}
			}
			if err := d.Wait(); err != nil {
				return err
			}
			if me == 1 {
				if err := d.Lock(id); err != nil {
					return err
				}
				got := c[0]
				if err := d.Unlock(id); err != nil {
					return err
				}
				if got != second && lost == nil {
					// Not returned at once: the other rank waits at the
					// collective calls below.
					lost = fmt.Errorf("round %d: read %d under lock %d after rank 0 wrote %d under it", round, got, id, second)
				}
			}
			if err := d.Barrier(); err != nil {
				return err
			}
			if err := d.Free(r); err != nil {
				return err
			}
		}
		if lost != nil {
			return lost
		}
		if me == 0 && shmem.PostedLocks(d) == posted {
			return fmt.Errorf("no Lock of lock %d was claimed in %d rounds", id, rounds)
		}
		return nil
	})
}
