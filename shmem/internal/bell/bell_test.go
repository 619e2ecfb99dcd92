package bell

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio/shm"
)

// readable reports whether a ring waits on b's socket.
func readable(t *testing.T, b *Bell) bool {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(b.FD()), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 100)
		if err == unix.EINTR {
			continue // a signal of the runtime (preemption); poll again
		}
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
}

// A ringer rings only while the bell says its owner sleeps.
func TestRingOnlyWhenSleeping(t *testing.T) {
	b, err := New("bell-test", 3)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r, err := Dial(b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !readable(t, b) {
		t.Fatal("Dial's test ring did not arrive")
	}
	b.Drain()
	r.Ring()
	if readable(t, b) {
		t.Fatal("a ring arrived while the owner polls")
	}
	b.SetSleeping(true)
	r.Ring()
	if !readable(t, b) {
		t.Fatal("no ring while the owner sleeps")
	}
	b.Drain()
	if readable(t, b) {
		t.Fatal("Drain left a ring")
	}
	// Several rings (the socket queues a few only) go in one Drain.
	for range 5 {
		r.Ring()
	}
	b.Drain()
	if readable(t, b) {
		t.Fatal("Drain left one of several rings")
	}
	b.Unlink()
	if _, err := os.Stat(b.Addr().File); !os.IsNotExist(err) {
		t.Fatalf("the word's file is still there: %v", err)
	}
	r.Ring() // the mapping outlives the file
	if !readable(t, b) {
		t.Fatal("no ring after Unlink")
	}
}

// Addresses outside the shared memory directory, and bells that do not
// exist, are refused.
func TestDialRefusesBadAddresses(t *testing.T) {
	for _, a := range []Addr{
		{},
		{Socket: "x", File: "/etc/passwd"},
		{Socket: "x", File: Dir + "/../etc/passwd"},
		{Socket: "jia-no-such-bell", File: Dir + "/jia-no-such-bell"},
	} {
		if r, err := Dial(a); err == nil {
			r.Close()
			t.Errorf("Dial(%+v) worked", a)
		}
	}
}

// TestNamedLikeSegments: the bell's file is named like the shm provider's
// segments, the job id mapped alike ('-' kept), so that the provider's
// Leftovers finds it after a crash.
func TestNamedLikeSegments(t *testing.T) {
	old := Dir
	Dir = t.TempDir()
	defer func() { Dir = old }()
	const job = "job-7.a/b"
	b, err := New(job, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	segs, err := shm.Leftovers(Dir, job)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) != 1 || segs[0].Path != b.Addr().File || segs[0].Pid != os.Getpid() {
		t.Fatalf("Leftovers(%q) lists %+v; want the bell's file %s of pid %d", job, segs, b.Addr().File, os.Getpid())
	}
}
