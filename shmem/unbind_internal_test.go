package shmem

import (
	goruntime "runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestUnbind checks that a thread bound to one processor, as a rank's
// threads are under jiarun --bind-to core, may run on every processor of
// the process again after unbind, so that the pager it starts is not
// confined to its rank's processor.
func TestUnbind(t *testing.T) {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		t.Fatal(err)
	}
	if allowed.Count() < 2 {
		t.Skipf("skipped: this process may use %d processor; unbinding needs two to show", allowed.Count())
	}
	done := make(chan unix.CPUSet)
	go func() {
		goruntime.LockOSThread() // the thread ends with the goroutine
		var one unix.CPUSet
		for c := 0; ; c++ {
			if allowed.IsSet(c) {
				one.Set(c)
				break
			}
		}
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			t.Error(err)
		}
		unbind()
		var got unix.CPUSet
		if err := unix.SchedGetaffinity(0, &got); err != nil {
			t.Error(err)
		}
		done <- got
	}()
	if got := <-done; got != allowed {
		t.Fatalf("after unbind the thread may use %d processors, want the process's %d", got.Count(), allowed.Count())
	}
}
