package tcp_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/rdmaiotest"
)

// TestRetryHungPeer: a peer that is connected but stopped (SIGSTOP: its
// kernel still takes the bytes, its process never answers) makes the
// outstanding send complete with RETRY_EXC_ERR once QPAttr.Timeout ×
// (RetryCount+1) passes without progress.
func TestRetryHungPeer(t *testing.T) {
	f := benchFabric()
	job := f.NewJob()
	dev, err := f.OpenRank(job, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	s, err := rdmaiotest.StartSession(dev, rdmaiotest.PeerCommand(job),
		rdmaiotest.SessionConfig{RetryCount: 1, Timeout: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PingPong(100); err != nil {
		t.Fatal(err)
	}
	pid := s.PeerPID()
	if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The signal takes effect when the kernel next schedules the peer: on a
	// loaded machine it could still answer the ping first. Wait until it
	// is really stopped.
	for deadline := time.Now().Add(10 * time.Second); !stopped(pid); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("peer %d not stopped 10 s after SIGSTOP", pid)
		}
	}
	err = s.PingPong(1) // the hang guard of the session bounds this at a minute
	unix.Kill(pid, unix.SIGKILL)
	s.Close() // the peer was killed: its exit status is an error
	var wce *rdmaio.WCError
	if !errors.As(err, &wce) || wce.Status != rdmaio.StatusRetryExcErr || wce.VendorErr != uint32(unix.ETIMEDOUT) {
		t.Fatalf("ping-pong with a stopped peer: %v, want RETRY_EXC_ERR (ETIMEDOUT)", err)
	}
}

// TestRetrySparesLivePeers: the retry timer leaves alone a peer that is
// alive but quiet: unsignaled sends whose acknowledgements wait for company,
// a peer program that does not poll (its service goroutine answers), and a
// long receiver-not-ready wait.
func TestRetrySparesLivePeers(t *testing.T) {
	// A bound of 250 ms: short enough for a quick test, long enough for
	// the service goroutines of a loaded machine to answer.
	p := newPair(t, 1<<20, map[string]string{"retry_timeout": "250ms"})
	wc := make([]rdmaio.WorkCompletion, 8)
	quiet := func() { time.Sleep(time.Second) } // four bounds
	recv := []rdmaio.RecvWR{{ID: 1, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Heap[1], 0, 64)}}}
	unsignaled := []rdmaio.SendWR{{ID: 2, Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Heap[0], 0, 8)}}}
	signaled := []rdmaio.SendWR{{ID: 3, Opcode: rdmaio.OpSend, Flags: rdmaio.SendSignaled, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Heap[0], 0, 8)}}}
	write := []rdmaio.SendWR{{ID: 4, Opcode: rdmaio.OpRDMAWrite, Flags: rdmaio.SendSignaled, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Heap[0], 0, 8)},
		RemoteAddr: p.Alloc[1].Addr(), RKey: p.Alloc[1].RKey()}}

	// Unsignaled: the acknowledgement may never come on its own.
	if _, err := p.RC[1].PostRecv(recv); err != nil {
		t.Fatal(err)
	}
	post1(t, p.RC[0], unsignaled)
	pollN(t, p.CQ[1], wc, 1)
	quiet()
	// Rank 1's program does not poll: its service serves the write.
	for range 20 {
		post1(t, p.RC[0], write)
		pollN(t, p.CQ[0], wc, 1)
	}
	quiet()
	// Receiver not ready for a while, then ready.
	post1(t, p.RC[0], signaled)
	quiet()
	if _, err := p.RC[1].PostRecv(recv); err != nil {
		t.Fatal(err)
	}
	pollN(t, p.CQ[0], wc, 1) // fails on any error completion
	pollN(t, p.CQ[1], wc, 1)
	if s := p.RC[0].State(); s != rdmaio.StateRTS {
		t.Fatalf("QP in %v after quiet periods", s)
	}
}

// stopped reports whether process pid is stopped by a signal (state T in
// /proc/PID/stat).
func stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'T'
}
