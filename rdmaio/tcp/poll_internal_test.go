package tcp

import (
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/rdmaiotest"
)

// BenchmarkEmptyPoll is the cost of one CQ.Poll that finds nothing on a
// connected, busy-polled QP (one spin of a waiting poller), against a
// read(2) of an empty non-blocking socket ("raw", what the reference
// ping-pong spins on) and a recvfrom(2) of one ("rawrecv", what the
// provider calls): the time a poller takes to notice a message is about
// half of it.
func BenchmarkEmptyPoll(b *testing.B) {
	for _, raw := range []struct {
		name string
		read func(fd int, b []byte) (int, unix.Errno)
	}{{"raw", sysRead}, {"rawrecv", sysRecvStream}} {
		b.Run(raw.name, func(b *testing.B) {
			fa, fb, err := rdmaiotest.TCPPair()
			if err != nil {
				b.Fatal(err)
			}
			defer unix.Close(fa)
			defer unix.Close(fb)
			var buf [8]byte
			defer rdmaiotest.ThreadCPU(b)()
			for b.Loop() {
				if _, e := raw.read(fa, buf[:]); e == 0 {
					b.Fatal("read an empty socket")
				}
			}
		})
	}
	b.Run("tcp", func(b *testing.B) {
		job := fmt.Sprintf("emptypoll-%d", os.Getpid())
		p := rdmaiotest.NewPair(b, func(rank int) (rdmaio.Device, error) {
			return Open(rdmaio.Config{Job: job, Rank: rank, LocalSize: 2})
		}, 4096, rdmaio.AccessAll)
		wc := make([]rdmaio.WorkCompletion, 4)
		// One message each way makes the connection the hot one.
		for i := range 2 {
			if _, err := p.RC[1-i].PostRecv([]rdmaio.RecvWR{{ID: 1, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Alloc[1-i], 0, 64)}}}); err != nil {
				b.Fatal(err)
			}
			if _, err := p.RC[i].PostSend([]rdmaio.SendWR{{ID: 2, Opcode: rdmaio.OpSend, Flags: rdmaio.SendSignaled,
				SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Alloc[i], 0, 8)}}}); err != nil {
				b.Fatal(err)
			}
			rdmaiotest.PollN(b, p.CQ[1-i], wc, 1)
			rdmaiotest.PollN(b, p.CQ[i], wc, 1)
		}
		cq := p.CQ[0]
		defer rdmaiotest.ThreadCPU(b)()
		for b.Loop() {
			if cq.Poll(wc) != 0 {
				b.Fatal("completion from nowhere")
			}
		}
	})
}

// watchdogPair connects two devices of a job named after name, with the
// passive service's backstop taken out of play, so that only the watchdog
// timer wakes a passive service.
func watchdogPair(t *testing.T, name string) *rdmaiotest.Pair {
	job := fmt.Sprintf("%s-%d", name, os.Getpid())
	return rdmaiotest.NewPair(t, func(rank int) (rdmaio.Device, error) {
		d, err := Open(rdmaio.Config{Job: job, Rank: rank, LocalSize: 2})
		if err == nil {
			d.backstop.Store(int64(time.Hour))
		}
		return d, err
	}, 4096, rdmaio.AccessAll)
}

// TestWatchdogWakesService: pollers that wait on an empty CQ for a long
// time push the passive service's timer back again and again; once they
// stop, the timer fires and the service serves the device (here an RDMA
// WRITE into the rank whose program no longer polls). The backstop is
// taken out of play, so only the watchdog can wake the service.
func TestWatchdogWakesService(t *testing.T) {
	p := watchdogPair(t, "watchdog")
	d1 := p.Dev[1].(*Device)
	wc := make([]rdmaio.WorkCompletion, 4)
	write := []rdmaio.SendWR{{ID: 3, Opcode: rdmaio.OpRDMAWrite, Flags: rdmaio.SendSignaled,
		SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Alloc[0], 0, 8)}, RemoteAddr: p.Alloc[1].Addr(), RKey: p.Alloc[1].RKey()}}
	recv := []rdmaio.RecvWR{{ID: 1, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Alloc[1], 64, 64)}}}
	send := []rdmaio.SendWR{{ID: 2, Opcode: rdmaio.OpSend, Flags: rdmaio.SendSignaled, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Alloc[0], 64, 8)}}}
	for round := range 3 {
		p.AllocBuf[0][0] = byte(round + 1)
		// A message makes rank 1's connection hot, which wakes its service;
		// rank 1's program then polls until the service has gone passive
		// and the watchdog has been pushed back many times.
		if _, err := p.RC[1].PostRecv(recv); err != nil {
			t.Fatal(err)
		}
		if _, err := p.RC[0].PostSend(send); err != nil {
			t.Fatal(err)
		}
		rdmaiotest.PollN(t, p.CQ[1], wc, 1)
		rdmaiotest.PollN(t, p.CQ[0], wc, 1)
		passive := false
		for i := 0; i < 50*feedWatchdogEvery || !passive; i++ {
			if i == 1<<24 {
				t.Fatal("the service never left progress to the poller")
			}
			if p.CQ[1].Poll(wc) != 0 {
				t.Fatal("completion from nowhere")
			}
			passive = passive || d1.svcPassive.Load()
		}
		// Then it stops: its service must serve the write.
		if _, err := p.RC[0].PostSend(write); err != nil {
			t.Fatal(err)
		}
		rdmaiotest.PollN(t, p.CQ[0], wc, 1)
		if got := p.AllocBuf[1][0]; got != byte(round+1) {
			t.Fatalf("round %d: target holds %d", round, got)
		}
	}
}

// TestWatchdogPushAfterClose: a poller that pushes the watchdog after the
// device closed (it read svcPassive just before Close) must not program
// the descriptor number the timer had, which the process may have reused
// meanwhile; here another timer takes that number.
func TestWatchdogPushAfterClose(t *testing.T) {
	d, err := Open(rdmaio.Config{Job: fmt.Sprintf("watchdog-close-%d", os.Getpid()), Rank: 0, LocalSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	num := d.wdFd
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	other, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(other)
	if other != num {
		if err := unix.Dup2(other, num); err != nil {
			t.Fatal(err)
		}
		defer unix.Close(num)
	}
	d.feedWatchdog()
	var cur unix.ItimerSpec
	if err := unix.TimerfdGettime(num, &cur); err != nil {
		t.Fatal(err)
	}
	if cur.Value.Sec != 0 || cur.Value.Nsec != 0 {
		t.Fatalf("a closed device's watchdog push armed descriptor %d (another timer): %+v", num, cur.Value)
	}
}
