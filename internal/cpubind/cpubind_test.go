package cpubind

import (
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPin: while pinned, the thread may run on the one processor only;
// afterwards on all it could before.
func TestPin(t *testing.T) {
	cpus := Allowed()
	if len(cpus) == 0 || !slices.IsSorted(cpus) {
		t.Fatalf("Allowed() = %v, want the processors in increasing order", cpus)
	}
	last := cpus[len(cpus)-1]
	unpin, err := Pin(last)
	if err != nil {
		t.Fatal(err)
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	if set.Count() != 1 || !set.IsSet(last) {
		t.Errorf("pinned to %d, the thread may run on %d processors (%d set: %v)", last, set.Count(), last, set.IsSet(last))
	}
	unpin()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if got := Allowed(); !slices.Equal(got, cpus) {
		t.Errorf("after unpinning: %v, want %v", got, cpus)
	}
	if _, err := Pin(-1); err == nil {
		t.Error("Pin(-1) did not fail")
	}
}
