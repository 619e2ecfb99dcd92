package shm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/jiarun/jia/rdmaio"
)

// TestStaleSegments checks that Stale finds the segments of any job whose
// creator has exited, zombies included, and nothing else.
func TestStaleSegments(t *testing.T) {
	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	zombie := exec.Command("sleep", "60")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	zombie.Process.Signal(syscall.SIGKILL)
	t.Cleanup(func() { zombie.Wait() })
	// Not reaped yet: wait until the kernel has made it a zombie.
	for deadline := time.Now().Add(5 * time.Second); processAlive(zombie.Process.Pid); {
		if time.Now().After(deadline) {
			t.Fatalf("killed process %d still counts as alive", zombie.Process.Pid)
		}
		time.Sleep(5 * time.Millisecond)
	}

	dir := t.TempDir()
	names := map[string]bool{ // name → stale
		fmt.Sprintf("jia-pmi-12-r0-p%d-d1-a1", exited.Process.Pid):   true, // a job name with a dash
		fmt.Sprintf("jia-jabc-r3-p%d-d2-main", zombie.Process.Pid):   true,
		fmt.Sprintf("jia-jabc-r1-p%d-d1-main", os.Getpid()):          false, // alive
		fmt.Sprintf("jia-jabc-r1-p%d-dx-main", exited.Process.Pid):   false, // not a provider name
		fmt.Sprintf("other-jabc-r1-p%d-d1-main", exited.Process.Pid): false,
		"jia-garbage": false,
	}
	var want []string
	for n, stale := range names {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if stale {
			want = append(want, p)
		}
	}
	slices.Sort(want)
	removed, err := CleanupStale(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if !slices.Equal(removed, want) {
		t.Fatalf("removed %v, want %v", removed, want)
	}
	for n, stale := range names {
		_, err := os.Stat(filepath.Join(dir, n))
		if gone := os.IsNotExist(err); gone != stale {
			t.Errorf("%s: removed %v, want %v", n, gone, stale)
		}
	}
}

// TestClosedRingsReadable: after Device.Close, a Poll that began before it
// may still check the inbound rings of the device's QPs without their locks
// (cq.Poll with several receiving QPs). The rings must read as empty
// rather than fault: the main segment is blanked, not unmapped.
func TestClosedRingsReadable(t *testing.T) {
	d, err := rdmaio.Open(Name, rdmaio.Config{Job: fmt.Sprintf("blank%d", os.Getpid()), LocalSize: 1,
		Options: map[string]string{"dir": t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	var qps []*qp
	for _, typ := range []rdmaio.QPType{rdmaio.RC, rdmaio.UD} {
		x, err := p.CreateQP(rdmaio.QPInitAttr{Type: typ, SendCQ: c, RecvCQ: c})
		if err != nil {
			t.Fatal(err)
		}
		qps = append(qps, x.(*qp))
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	wc := make([]rdmaio.WorkCompletion, 4)
	for _, q := range qps {
		if !q.recvIdle() {
			t.Errorf("%v QP of a closed device: ring not idle", q.typ)
		}
		if n := q.pollRecv(wc, nil); n != 0 {
			t.Errorf("%v QP of a closed device: %d completions", q.typ, n)
		}
	}
}
