package shm_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/rdmaiotest"
	"github.com/jiarun/jia/rdmaio/shm"
)

// TestCMAOff: without process_vm_readv/writev (here disabled; on a host with
// kernel.yama.ptrace_scope ≥ 2 for real) ordinary Go memory cannot be
// reached by peers. The errors say so and name the alternative; memory from
// PD.Alloc and small SENDs keep working.
func TestCMAOff(t *testing.T) {
	p := newPair(t, 1<<20, map[string]string{"cma": "off"})
	d := p.Dev[0].(*shm.Device)
	if d.CMAError() == nil {
		t.Fatalf("CMAError() = nil with cma=off")
	}
	_, err := p.PD[0].RegMR(make([]byte, 4096), rdmaio.AccessLocalWrite|rdmaio.AccessRemoteWrite)
	if !errors.Is(err, rdmaio.ErrNotSupported) || !strings.Contains(err.Error(), "PD.Alloc") {
		t.Fatalf("remote access to ordinary memory without CMA: %v", err)
	}
	local, err := p.PD[0].RegMR(make([]byte, 1<<20), 0)
	if err != nil {
		t.Fatal(err)
	}
	wc := make([]rdmaio.WorkCompletion, 4)
	dst := p.Alloc[1]
	post := func(src rdmaio.MR, n int) error {
		_, err := p.RC[0].PostSend([]rdmaio.SendWR{{ID: 2, Opcode: rdmaio.OpSend, Flags: rdmaio.SendSignaled, SGL: []rdmaio.SGE{rdmaio.MRSGE(src, 0, n)}}})
		if err != nil {
			return err
		}
		if _, err := p.RC[1].PostRecv([]rdmaio.RecvWR{{ID: 1, SGL: []rdmaio.SGE{rdmaio.MRSGE(dst, 0, n)}}}); err != nil {
			t.Fatal(err)
		}
		pollN(t, p.CQ[1], wc, 1)
		pollN(t, p.CQ[0], wc, 1)
		return nil
	}
	if err := post(local, 1<<20); !errors.Is(err, rdmaio.ErrNotSupported) || !strings.Contains(err.Error(), "process_vm_readv") {
		t.Fatalf("large SEND from ordinary memory without CMA: %v", err)
	}
	// The refused post left nothing queued: small SENDs and SENDs from
	// PD.Alloc memory work.
	if err := post(local, 64); err != nil {
		t.Fatalf("small SEND: %v", err)
	}
	if err := post(p.Alloc[0], 1<<20); err != nil {
		t.Fatalf("large SEND from shared memory: %v", err)
	}
}

// TestEarlyUnlink: with LocalSize known, a segment's file disappears as
// soon as every peer has mapped it, while the devices keep working.
func TestEarlyUnlink(t *testing.T) {
	p := newPair(t, 4096, nil) // LocalSize 2: each main segment has one expected peer
	for _, name := range segmentFiles(t) {
		if name == mainName(p.Dev[0]) || name == mainName(p.Dev[1]) {
			t.Fatalf("main segment %s still linked after the peer mapped it", name)
		}
	}
	// rank 1 accesses rank 0's allocation: it maps it, and it is unlinked.
	wc := make([]rdmaio.WorkCompletion, 2)
	if _, err := p.RC[1].PostSend([]rdmaio.SendWR{{Opcode: rdmaio.OpRDMAWrite, Flags: rdmaio.SendSignaled,
		SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Heap[1], 0, 8)}, RemoteAddr: p.Alloc[0].Addr(), RKey: p.Alloc[0].RKey()}}); err != nil {
		t.Fatal(err)
	}
	pollN(t, p.CQ[1], wc, 1)
	prefix := strings.TrimSuffix(mainName(p.Dev[0]), "-main")
	for _, name := range segmentFiles(t) {
		if strings.HasPrefix(name, prefix) {
			t.Fatalf("segment %s of rank 0 still linked", name)
		}
	}
}

func mainName(d rdmaio.Device) string {
	a := d.Addr()
	return string(a[26:])
}

func segmentFiles(t *testing.T) []string {
	ents, err := os.ReadDir(shm.DefaultDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestCleanup: Leftovers finds a job's segments and whether their creator
// lives; Cleanup removes those of dead processes (or all).
func TestCleanup(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("cannot run true: %v", err)
	}
	dead := cmd.Process.Pid
	job := "cleanup/job"
	files := map[string]bool{
		"jia-cleanup_job-r0-p" + itoa(dead) + "-d1-main":      false,
		"jia-cleanup_job-r1-p" + itoa(os.Getpid()) + "-d1-a3": true,
		"jia-cleanup_job2-r0-p" + itoa(dead) + "-d1-main":     true, // another job
		"jia-cleanup_job-r0-p" + itoa(dead) + "-d2-a1":        false,
		"unrelated": true,
	}
	for f := range files {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	left, err := shm.Leftovers(dir, job)
	if err != nil || len(left) != 3 {
		t.Fatalf("Leftovers: %v, %v", left, err)
	}
	removed, err := shm.Cleanup(dir, job, false)
	if err != nil || len(removed) != 2 {
		t.Fatalf("Cleanup: %v, %v", removed, err)
	}
	for f, keep := range files {
		_, err := os.Stat(filepath.Join(dir, f))
		if keep != (err == nil) {
			t.Errorf("%s: kept %v, want %v", f, err == nil, keep)
		}
	}
	if removed, _ := shm.Cleanup(dir, job, true); len(removed) != 1 {
		t.Fatalf("Cleanup(all) removed %v", removed)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestOpenErrors: bad configurations are errors that say what is wrong.
func TestOpenErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  rdmaio.Config
		want string
	}{
		{rdmaio.Config{Rank: 0}, "empty job"},
		{rdmaio.Config{Job: "j", Rank: -1}, "rank"},
		{rdmaio.Config{Job: "j", Options: map[string]string{"colour": "blue"}}, "unknown option"},
		{rdmaio.Config{Job: "j", Options: map[string]string{"ring_bytes": "1000"}}, "ring_bytes"},
		{rdmaio.Config{Job: "j", Options: map[string]string{"ring_bytes": "49152"}}, "ring_bytes 49152: want a power of two"},
		{rdmaio.Config{Job: "j", Options: map[string]string{"max_qp": "x"}}, "max_qp"},
		{rdmaio.Config{Job: "j", Options: map[string]string{"eager": "1000000"}}, "eager"},
		{rdmaio.Config{Job: "j", Options: map[string]string{"spin": "-1s"}}, "spin"},
		{rdmaio.Config{Job: "j", Options: map[string]string{"cma": "maybe"}}, "cma"},
		{rdmaio.Config{Job: "j", Options: map[string]string{"warm": "maybe"}}, "warm"},
		{rdmaio.Config{Job: "j", Options: map[string]string{"dir": "/nonexistent"}}, "no device"},
	} {
		d, err := rdmaio.Open(shm.Name, c.cfg)
		if err == nil {
			d.Close()
			t.Errorf("%+v: opened", c.cfg)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %q does not mention %q", c.cfg, err, c.want)
		}
	}
}

// TestForeignSegment: an address naming a missing segment, or a device of
// another job, is refused.
func TestForeignSegment(t *testing.T) {
	a, err := rdmaio.Open(shm.Name, rdmaio.Config{Job: "job-a", Rank: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := rdmaio.Open(shm.Name, rdmaio.Config{Job: "job-b", Rank: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	pd, err := a.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	if _, err := pd.CreateAH(rdmaio.AHAttr{Addr: b.Addr()}); !errors.Is(err, rdmaio.ErrWrongJob) {
		t.Fatalf("address of another job's device: %v", err)
	}
	addr := a.Addr()
	addr[len(addr)-1] ^= 1 // names a file that does not exist
	if _, err := pd.CreateAH(rdmaio.AHAttr{Addr: addr}); !errors.Is(err, rdmaio.ErrBadAddress) {
		t.Fatalf("address of a missing segment: %v", err)
	}
}

// TestRemoteQPReplaced: after the remote QP is destroyed and its slot reused
// by a new QP, the old connection's sends fail instead of reaching the new
// QP.
func TestRemoteQPReplaced(t *testing.T) {
	p := newPair(t, 4096, nil)
	if err := p.RC[1].Close(); err != nil {
		t.Fatal(err)
	}
	q, err := p.PD[1].CreateQP(rdmaio.QPInitAttr{Type: rdmaio.RC, SendCQ: p.CQ[1], RecvCQ: p.CQ[1]})
	if err != nil {
		t.Fatal(err)
	}
	if q.QPN()&0xffff != p.RC[1].QPN()&0xffff || q.QPN() == p.RC[1].QPN() {
		t.Fatalf("new QP %#x does not reuse the slot of %#x with a new generation", q.QPN(), p.RC[1].QPN())
	}
	if err := q.Modify(rdmaio.QPAttr{State: rdmaio.StateInit}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.PostRecv([]rdmaio.RecvWR{{ID: 1, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Heap[1], 0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.RC[0].PostSend([]rdmaio.SendWR{{ID: 5, Opcode: rdmaio.OpSend, Inline: []byte("stale"), Flags: rdmaio.SendSignaled}}); err != nil {
		t.Fatal(err)
	}
	wc := make([]rdmaio.WorkCompletion, 1)
	for p.CQ[0].Poll(wc) == 0 {
	}
	if wc[0].ID != 5 || wc[0].Status != rdmaio.StatusRetryExcErr || wc[0].VendorErr != shm.VendorQPDestroyed {
		t.Fatalf("send to a destroyed QP: %+v", wc[0])
	}
	if n := p.CQ[1].Poll(wc); n != 0 {
		t.Fatalf("the new QP received %+v", wc[0])
	}
}

// TestCloseWhilePolled: Device.Close while other goroutines poll its CQ
// (three receiving QPs: Polls check their rings without locks) and a
// message arrives. The pollers neither fault nor see anything after the
// close, and the close is clean.
func TestCloseWhilePolled(t *testing.T) {
	for round := 0; round < 20; round++ {
		job := newJob()
		a := openEndpointCfg(t, rdmaio.Config{Job: job, Rank: 0, LocalSize: 2})
		z := openEndpointCfg(t, rdmaio.Config{Job: job, Rank: 1, LocalSize: 2})
		a.connect(parseCard(t, z.card()))
		z.connect(parseCard(t, a.card()))
		stop := make(chan struct{})
		done := make(chan int, 2)
		for g := 0; g < 2; g++ {
			go func() {
				wc := make([]rdmaio.WorkCompletion, 4)
				n := 0
				for {
					select {
					case <-stop:
						done <- n
						return
					default:
					}
					n += a.cq.Poll(wc)
				}
			}()
		}
		if _, err := z.rc.PostSend([]rdmaio.SendWR{{Opcode: rdmaio.OpSend, Inline: []byte("late")}}); err != nil {
			t.Fatal(err)
		}
		if err := a.dev.Close(); err != nil {
			t.Fatalf("round %d: close while polled: %v", round, err)
		}
		// Polls after the close return nothing.
		wc := make([]rdmaio.WorkCompletion, 4)
		if n := a.cq.Poll(wc); n != 0 {
			t.Fatalf("round %d: poll after close: %d completions", round, n)
		}
		close(stop)
		<-done
		<-done
		z.dev.Close()
	}
}

// TestWarmOff: with option warm=off the rings' and send queues' pages are
// first touched by the messages themselves; SENDs that go round the ring
// several times and a ping-pong still arrive.
func TestWarmOff(t *testing.T) {
	job := newJob()
	var devs [2]rdmaio.Device
	for r := range devs {
		d, err := rdmaio.Open(shm.Name, rdmaio.Config{Job: job, Rank: r, LocalSize: 2, Options: map[string]string{"warm": "off"}})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		devs[r] = d
	}
	s, err := rdmaiotest.NewSession(devs, rdmaiotest.SessionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Send(4096, 16, 4, 200); err != nil {
		t.Fatalf("SENDs of 4 KiB round the ring: %v", err)
	}
	if err := s.PingPong(100); err != nil {
		t.Fatalf("ping-pong: %v", err)
	}
}
