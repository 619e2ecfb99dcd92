package jia

import (
	"context"
	"fmt"
	"sync"

	"github.com/jiarun/jia/shmem"
)

var (
	dsmMu    sync.Mutex
	dsmState *shmem.DSM
	dsmDone  bool
)

// dsm returns the rank's DSM, or an error saying why there is none.
func dsm(call string) (*shmem.DSM, error) {
	r := get(call)
	dsmMu.Lock()
	defer dsmMu.Unlock()
	switch {
	case dsmDone:
		return nil, fmt.Errorf("shmem: rank %d: %s: %w", r.Rank(), call, shmem.ErrClosed)
	case dsmState == nil:
		return nil, fmt.Errorf("shmem: rank %d: %s: the DSM is not started: every rank must call jia.Alloc first", r.Rank(), call)
	}
	return dsmState, nil
}

// Alloc allocates a region of the distributed shared memory (DSM):
// JIAJIA's model in Go, memory that every rank maps at the same address and
// reads and writes with ordinary Go code, kept coherent by locks and
// barriers under scope consistency.
//
//	r, err := jia.Alloc(n*8, shmem.BlockCyclic(1, 0)) // collective
//	a := shmem.Slice[float64](r)
//	jia.Lock(0)
//	a[0] += 1        // seen by the next holder of lock 0
//	jia.Unlock(0)
//	jia.DSMBarrier() // every write before it is seen by everyone after it
//	…
//	jia.CloseDSM()   // collective, before Finalize
//
// The region has size bytes (rounded up to whole pages), and its pages
// have their homes as p says (the zero Placement deals them one by one to
// ranks 0, 1, …). Alloc is collective: every rank calls it with the same
// size and placement, in the same order, one call at a time, and gets the
// region at the same address; a rank that differs gets an error naming the
// other rank's call, and so do the others.
//
// The first Alloc starts the DSM: the rank's pager process, which serves
// its page faults, and its port; a program that never allocates starts
// neither. Every other DSM call before the first Alloc is an error. The
// coherence calls are named DSMBarrier and DSMWait, apart from message
// passing's barriers. Call CloseDSM before Finalize: it waits until every
// rank is done with the DSM, so that no rank's exit takes away pages
// another still needs. Every error names the rank and the call; package
// shmem has the error values for errors.Is.
func Alloc(size int, p shmem.Placement) (*shmem.Region, error) {
	r := get("Alloc")
	dsmMu.Lock()
	if dsmDone {
		dsmMu.Unlock()
		return nil, fmt.Errorf("shmem: rank %d: Alloc(%d bytes): %w", r.Rank(), size, shmem.ErrClosed)
	}
	d := dsmState
	if d == nil {
		var err error
		d, err = shmem.Start(context.Background(), r)
		if err != nil {
			dsmMu.Unlock()
			return nil, err
		}
		dsmState = d
	}
	dsmMu.Unlock()
	return d.Alloc(size, p)
}

// Free frees a region from Alloc, collectively. Any later access to it
// stops the job with an error naming the access.
func Free(r *shmem.Region) error {
	d, err := dsm("Free")
	if err != nil {
		return err
	}
	return d.Free(r)
}

// Lock acquires DSM lock id (any id ≥ 0): this rank then sees every write
// made under the lock by its earlier holders.
func Lock(id int) error {
	d, err := dsm(fmt.Sprintf("Lock(%d)", id))
	if err != nil {
		return err
	}
	return d.Lock(id)
}

// Unlock releases DSM lock id, making this rank's writes since Lock visible
// to the lock's next holder. Unlocking a lock not held is an error.
func Unlock(id int) error {
	d, err := dsm(fmt.Sprintf("Unlock(%d)", id))
	if err != nil {
		return err
	}
	return d.Unlock(id)
}

// DSMBarrier is the DSM's coherence barrier (JIAJIA's jia_barrier): it
// waits for every rank, and every write made before it by any rank is seen
// by every rank after it. Calling it while holding a lock is an error.
func DSMBarrier() error {
	d, err := dsm("DSMBarrier")
	if err != nil {
		return err
	}
	return d.Barrier()
}

// DSMWait is a plain barrier through the DSM (JIAJIA's jia_wait): it waits
// for every rank and orders no memory.
func DSMWait() error {
	d, err := dsm("DSMWait")
	if err != nil {
		return err
	}
	return d.Wait()
}

// SetCV sets DSM condition variable id, releasing every WaitCV on it.
// Condition variables order no memory: pair them with locks.
func SetCV(id int) error {
	d, err := dsm(fmt.Sprintf("SetCV(%d)", id))
	if err != nil {
		return err
	}
	return d.SetCV(id)
}

// ResetCV clears DSM condition variable id.
func ResetCV(id int) error {
	d, err := dsm(fmt.Sprintf("ResetCV(%d)", id))
	if err != nil {
		return err
	}
	return d.ResetCV(id)
}

// WaitCV waits until DSM condition variable id is set.
func WaitCV(id int) error {
	d, err := dsm(fmt.Sprintf("WaitCV(%d)", id))
	if err != nil {
		return err
	}
	return d.WaitCV(id)
}

// DSMStats returns what this rank's DSM did so far.
func DSMStats() (shmem.Stats, error) {
	d, err := dsm("DSMStats")
	if err != nil {
		return shmem.Stats{}, err
	}
	return d.Stats()
}

// CloseDSM ends this rank's use of the DSM, collectively: it returns once
// every rank has closed, then stops the rank's pager and unmaps the
// regions. A program that never allocated has nothing to close; closing
// twice is not an error. Call it before Finalize.
func CloseDSM() error {
	get("CloseDSM")
	dsmMu.Lock()
	d := dsmState
	dsmState, dsmDone = nil, d != nil || dsmDone
	dsmMu.Unlock()
	if d == nil {
		return nil
	}
	return d.Close()
}
