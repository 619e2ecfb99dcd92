package shm_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/shm"
)

// A second process is this test binary run again with helperEnv set; it runs
// TestHelperProcess, which serves commands that arrive as SENDs with an
// immediate. Addresses are exchanged as text lines over its stdin and
// stdout.
const (
	helperEnv = "JIA_SHM_HELPER"
	jobEnv    = "JIA_SHM_JOB"
	bufSize   = 16 << 20
	ctrlSlots = 64
	ctrlSize  = 256
)

// Commands (the immediate of a control SEND).
const (
	cmdEcho  = iota + 1 // reply with the payload
	cmdCheck            // payload: which, seed, length: reply "ok" if the buffer holds the pattern
	cmdFill             // payload: which, seed, length: fill the buffer with the pattern
	cmdAdd              // payload: count: add 1 to the counter count times with CPU atomics
	cmdSend             // payload: which, seed, length: SEND that much of the buffer, filled
	cmdUD               // send a datagram to the peer's UD QP
	cmdStop             // close the device and exit
	cmdCrash            // exit without closing anything
)

// endpoint is one rank of the cross-process tests: an RC and a UD QP to the
// peer, a control area, two 16 MiB buffers (ordinary and shared memory) and
// a shared counter.
type endpoint struct {
	tb      testing.TB
	dev     rdmaio.Device
	pd      rdmaio.PD
	cq      rdmaio.CQ
	rc, ud  rdmaio.QP
	data    rdmaio.QP // bulk SENDs (RC receives are FIFO, so not on rc)
	ah      rdmaio.AH
	ctrl    rdmaio.MR
	bufs    [2]rdmaio.MR // 0: shared (PD.Alloc), 1: ordinary
	counter rdmaio.MR
	wc      []rdmaio.WorkCompletion
	recvs   []rdmaio.WorkCompletion
	peer    peerInfo
	rwrs    [][]rdmaio.RecvWR // one prebuilt receive per control slot
}

type peerInfo struct {
	addr            []byte
	rcQPN, udQPN    uint32
	dataQPN         uint32
	keys            [3]uint32 // shared, ordinary, counter
	addrs           [3]uint64
	pid             int
	ordinaryWritten bool
}

func openEndpoint(tb testing.TB, job string, rank int) *endpoint {
	return openEndpointCfg(tb, rdmaio.Config{Job: job, Rank: rank, LocalSize: 2})
}

func openEndpointCfg(tb testing.TB, cfg rdmaio.Config) *endpoint {
	rank := cfg.Rank
	e := &endpoint{tb: tb, wc: make([]rdmaio.WorkCompletion, 16)}
	var err error
	check := func(what string, err error) {
		if err != nil {
			tb.Fatalf("rank %d: %s: %v", rank, what, err)
		}
	}
	e.dev, err = rdmaio.Open(shm.Name, cfg)
	check("open", err)
	e.pd, err = e.dev.AllocPD()
	check("pd", err)
	e.cq, err = e.dev.CreateCQ(1024)
	check("cq", err)
	e.rc, err = e.pd.CreateQP(rdmaio.QPInitAttr{Type: rdmaio.RC, SendCQ: e.cq, RecvCQ: e.cq, Cap: rdmaio.QPCap{MaxInline: 256}})
	check("rc qp", err)
	e.ud, err = e.pd.CreateQP(rdmaio.QPInitAttr{Type: rdmaio.UD, SendCQ: e.cq, RecvCQ: e.cq})
	check("ud qp", err)
	e.data, err = e.pd.CreateQP(rdmaio.QPInitAttr{Type: rdmaio.RC, SendCQ: e.cq, RecvCQ: e.cq})
	check("data qp", err)
	e.ctrl, err = e.pd.RegMR(make([]byte, 2*ctrlSlots*ctrlSize), rdmaio.AccessLocalWrite)
	check("ctrl mr", err)
	shared, err := e.pd.Alloc(bufSize)
	check("alloc", err)
	e.bufs[0], err = e.pd.RegMR(shared, rdmaio.AccessAll&^rdmaio.AccessRemoteAtomic)
	check("shared mr", err)
	e.bufs[1], err = e.pd.RegMR(make([]byte, bufSize), rdmaio.AccessAll&^rdmaio.AccessRemoteAtomic)
	check("ordinary mr", err)
	cnt, err := e.pd.Alloc(64)
	check("alloc counter", err)
	e.counter, err = e.pd.RegMR(cnt, rdmaio.AccessAll)
	check("counter mr", err)
	check("rc init", e.rc.Modify(rdmaio.QPAttr{State: rdmaio.StateInit, Access: rdmaio.AccessRemote}))
	check("data init", e.data.Modify(rdmaio.QPAttr{State: rdmaio.StateInit}))
	check("ud init", e.ud.Modify(rdmaio.QPAttr{State: rdmaio.StateInit, QKey: qkey}))
	for i := 0; i < ctrlSlots; i++ {
		e.postCtrlRecv(i)
	}
	for i := 0; i < 8; i++ {
		_, err := e.ud.PostRecv([]rdmaio.RecvWR{{ID: 1000, SGL: []rdmaio.SGE{rdmaio.MRSGE(e.ctrl, ctrlSlots*ctrlSize, 64)}}})
		check("ud recv", err)
	}
	return e
}

func (e *endpoint) postCtrlRecv(slot int) {
	if e.rwrs == nil {
		for i := 0; i < ctrlSlots; i++ {
			e.rwrs = append(e.rwrs, []rdmaio.RecvWR{{ID: uint64(i), SGL: []rdmaio.SGE{rdmaio.MRSGE(e.ctrl, i*ctrlSize, ctrlSize)}}})
		}
	}
	if _, err := e.rc.PostRecv(e.rwrs[slot]); err != nil {
		e.tb.Fatalf("post control receive: %v", err)
	}
}

// card is the line a rank publishes: address, QPNs, keys, addresses, pid.
func (e *endpoint) card() string {
	s := fmt.Sprintf("%s %d %d %d", hex.EncodeToString(e.dev.Addr()), e.rc.QPN(), e.ud.QPN(), e.data.QPN())
	for _, m := range []rdmaio.MR{e.bufs[0], e.bufs[1], e.counter} {
		s += fmt.Sprintf(" %d %d", m.RKey(), m.Addr())
	}
	return s + fmt.Sprintf(" %d", os.Getpid())
}

func parseCard(tb testing.TB, line string) peerInfo {
	f := strings.Fields(line)
	if len(f) != 11 {
		tb.Fatalf("bad card %q", line)
	}
	var p peerInfo
	var err error
	if p.addr, err = hex.DecodeString(f[0]); err != nil {
		tb.Fatalf("bad card %q: %v", line, err)
	}
	num := func(s string) uint64 {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			tb.Fatalf("bad card %q: %v", line, err)
		}
		return v
	}
	p.rcQPN, p.udQPN, p.dataQPN = uint32(num(f[1])), uint32(num(f[2])), uint32(num(f[3]))
	for i := range 3 {
		p.keys[i], p.addrs[i] = uint32(num(f[4+2*i])), num(f[5+2*i])
	}
	p.pid = int(num(f[10]))
	return p
}

func (e *endpoint) connect(p peerInfo) {
	e.peer = p
	var err error
	if e.ah, err = e.pd.CreateAH(rdmaio.AHAttr{Addr: p.addr}); err != nil {
		e.tb.Fatalf("create ah: %v", err)
	}
	for _, a := range []struct {
		q rdmaio.QP
		a rdmaio.QPAttr
	}{
		{e.rc, rdmaio.QPAttr{State: rdmaio.StateRTR, Dest: rdmaio.AHAttr{Addr: p.addr}, DestQPN: p.rcQPN}},
		{e.rc, rdmaio.QPAttr{State: rdmaio.StateRTS, RNRRetry: rdmaio.RNRRetryInfinite}},
		{e.data, rdmaio.QPAttr{State: rdmaio.StateRTR, Dest: rdmaio.AHAttr{Addr: p.addr}, DestQPN: p.dataQPN}},
		{e.data, rdmaio.QPAttr{State: rdmaio.StateRTS, RNRRetry: rdmaio.RNRRetryInfinite}},
		{e.ud, rdmaio.QPAttr{State: rdmaio.StateRTR}},
		{e.ud, rdmaio.QPAttr{State: rdmaio.StateRTS}},
	} {
		if err := a.q.Modify(a.a); err != nil {
			e.tb.Fatalf("modify to %v: %v", a.a.State, err)
		}
	}
}

// post posts one signaled work request and waits for its completion,
// keeping receive completions that arrive meanwhile.
func (e *endpoint) post(q rdmaio.QP, wr rdmaio.SendWR) rdmaio.WorkCompletion {
	wr.Flags |= rdmaio.SendSignaled
	wr.ID = 1 << 40
	if _, err := q.PostSend([]rdmaio.SendWR{wr}); err != nil {
		e.tb.Fatalf("post %v: %v", wr.Opcode, err)
	}
	var done *rdmaio.WorkCompletion
	for done == nil {
		for _, c := range e.wait() {
			if c.Opcode.IsRecv() {
				e.recvs = append(e.recvs, c)
			} else if c.ID == 1<<40 {
				done = &c
			}
		}
	}
	return *done
}

func (e *endpoint) wait() []rdmaio.WorkCompletion {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := e.cq.Wait(ctx, e.wc)
	if err != nil {
		e.tb.Fatalf("wait: %v", err)
	}
	return e.wc[:n]
}

// send sends a control message (payload at most ctrlSize bytes).
func (e *endpoint) send(imm uint32, payload []byte) {
	area := e.ctrl.Bytes()[ctrlSlots*ctrlSize+64:]
	n := copy(area, payload)
	c := e.post(e.rc, rdmaio.SendWR{Opcode: rdmaio.OpSendImm, Imm: imm, SGL: []rdmaio.SGE{rdmaio.MRSGE(e.ctrl, ctrlSlots*ctrlSize+64, n)}})
	if c.Status != rdmaio.StatusSuccess {
		e.tb.Fatalf("control send: %v (vendor %#x)", c.Status, c.VendorErr)
	}
}

// recv returns the next control message on the RC QP.
func (e *endpoint) recv() (uint32, []byte) {
	for {
		for i, c := range e.recvs {
			if c.QPN != e.rc.QPN() {
				continue
			}
			e.recvs = append(e.recvs[:i], e.recvs[i+1:]...)
			if c.Status != rdmaio.StatusSuccess {
				e.tb.Fatalf("control receive: %+v", c)
			}
			msg := append([]byte(nil), e.ctrl.Bytes()[int(c.ID)*ctrlSize:int(c.ID)*ctrlSize+int(c.ByteLen)]...)
			e.postCtrlRecv(int(c.ID))
			return c.Imm, msg
		}
		e.recvs = append(e.recvs, e.wait()...)
	}
}

// take waits for a receive completion that match accepts and removes it.
func (e *endpoint) take(match func(*rdmaio.WorkCompletion) bool) *rdmaio.WorkCompletion {
	for {
		for i := range e.recvs {
			if c := e.recvs[i]; match(&c) {
				e.recvs = append(e.recvs[:i], e.recvs[i+1:]...)
				return &c
			}
		}
		e.recvs = append(e.recvs, e.wait()...)
	}
}

// call sends a command and returns the reply.
func (e *endpoint) call(cmd uint32, args ...uint64) []byte {
	b := make([]byte, 8*len(args))
	for i, a := range args {
		binary.LittleEndian.PutUint64(b[8*i:], a)
	}
	e.send(cmd, b)
	_, reply := e.recv()
	return reply
}

func pattern(b []byte, seed uint64) {
	x := seed*0x9e3779b97f4a7c15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x >> 24)
	}
}

func hasPattern(b []byte, seed uint64) bool {
	want := make([]byte, len(b))
	pattern(want, seed)
	return string(want) == string(b)
}

// TestHelperProcess is the second rank of the cross-process tests; it only
// runs when started by them.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("helper process for the cross-process tests")
	}
	if os.Getenv("JIA_DEBUG") != "" {
		go func() {
			time.Sleep(5 * time.Second)
			buf := make([]byte, 1<<20)
			fmt.Fprintf(os.Stderr, "helper stacks:\n%s\n", buf[:runtime.Stack(buf, true)])
		}()
	}
	e := openEndpoint(t, os.Getenv(jobEnv), 1)
	fmt.Printf("JIA %s\n", e.card())
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		t.Fatalf("no peer card")
	}
	e.connect(parseCard(t, in.Text()))
	fmt.Println("JIA ready")
	if os.Getenv(helperEnv) == "echo" {
		if err := e.serveEcho(); err != nil {
			t.Fatalf("echo: %v", err)
		}
		if err := e.dev.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		fmt.Println("JIA bye")
		return
	}
	for {
		cmd, msg := e.recv()
		if os.Getenv("JIA_DEBUG") != "" {
			fmt.Fprintf(os.Stderr, "helper: cmd %d msg %q\n", cmd, msg)
		}
		arg := func(i int) uint64 { return binary.LittleEndian.Uint64(msg[8*i:]) }
		switch cmd {
		case cmdEcho:
			e.send(0, msg)
		case cmdCheck:
			reply := "bad"
			if hasPattern(e.bufs[arg(0)].Bytes()[:arg(2)], arg(1)) {
				reply = "ok"
			}
			e.send(0, []byte(reply))
		case cmdFill:
			pattern(e.bufs[arg(0)].Bytes()[:arg(2)], arg(1))
			e.send(0, []byte("ok"))
		case cmdAdd:
			w := (*uint64)(unsafe.Pointer(&e.counter.Bytes()[0]))
			for i := uint64(0); i < arg(0); i++ {
				atomic.AddUint64(w, 1)
			}
			e.send(0, []byte("ok"))
		case cmdSend:
			m := e.bufs[arg(0)]
			pattern(m.Bytes()[:arg(2)], arg(1))
			if c := e.post(e.data, rdmaio.SendWR{Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{rdmaio.MRSGE(m, 0, int(arg(2)))}}); c.Status != rdmaio.StatusSuccess {
				t.Fatalf("big send: %v", c.Status)
			}
		case cmdUD:
			c := e.post(e.ud, rdmaio.SendWR{Opcode: rdmaio.OpSendImm, Imm: 77, Inline: []byte("datagram"), AH: e.ah, RemoteQPN: e.peer.udQPN, RemoteQKey: qkey})
			if c.Status != rdmaio.StatusSuccess {
				t.Fatalf("ud send: %v", c.Status)
			}
		case cmdStop:
			if err := e.dev.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			fmt.Println("JIA bye")
			return
		case cmdCrash:
			os.Exit(3)
		default:
			t.Fatalf("unknown command %d", cmd)
		}
	}
}

// child is a running helper process.
type child struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

func startChild(tb testing.TB, job, mode string) (*child, peerInfo) {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1", "-test.timeout=10m")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, jobEnv+"="+job)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	c := &child{cmd: cmd, in: in, lines: make(chan string, 16)}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if l, ok := strings.CutPrefix(s.Text(), "JIA "); ok {
				c.lines <- l
			} else if l := s.Text(); l != "PASS" && !strings.HasPrefix(l, "=== RUN") && !strings.HasPrefix(l, "--- PASS") {
				fmt.Fprintf(os.Stderr, "helper: %s\n", l)
			}
		}
		close(c.lines)
	}()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return c, parseCard(tb, c.line(tb))
}

func (c *child) line(tb testing.TB) string {
	tb.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			tb.Fatalf("helper process ended")
		}
		return l
	case <-time.After(time.Minute):
		tb.Fatalf("helper process silent for a minute")
	}
	return ""
}

// startPair starts a helper process and connects an endpoint of this
// process to it.
func startPair(tb testing.TB, mode string) (*endpoint, *child, string) {
	job := newJob()
	e := openEndpoint(tb, job, 0)
	c, info := startChild(tb, job, mode)
	e.connect(info)
	if _, err := fmt.Fprintf(c.in, "%s\n", e.card()); err != nil {
		tb.Fatal(err)
	}
	if l := c.line(tb); l != "ready" {
		tb.Fatalf("helper says %q", l)
	}
	return e, c, job
}

// TestCrossProcess runs every kind of operation between two processes:
// SENDs small and large (shared and ordinary memory), RDMA WRITE and READ
// into the other process's shared and ordinary memory, atomics racing with
// the other process's CPU atomics, UD both ways; then the other process
// closes and nothing is left in /dev/shm.
func TestCrossProcess(t *testing.T) {
	e, c, job := startPair(t, "commands")
	for i := 0; i < 100; i++ {
		msg := fmt.Sprintf("ping %d", i)
		e.send(cmdEcho, []byte(msg))
		if _, got := e.recv(); string(got) != msg {
			t.Fatalf("echo %q, got %q", msg, got)
		}
	}
	for which, name := range []string{"shared", "ordinary"} {
		for _, n := range []int{1, 4096, 1 << 20, bufSize} {
			t.Logf("%s memory, %d bytes", name, n)
			seed := uint64(n + which)
			// WRITE into the peer, the peer checks.
			pattern(e.bufs[1].Bytes()[:n], seed)
			wc := e.post(e.rc, rdmaio.SendWR{Opcode: rdmaio.OpRDMAWrite, SGL: []rdmaio.SGE{rdmaio.MRSGE(e.bufs[1], 0, n)},
				RemoteAddr: e.peer.addrs[which], RKey: e.peer.keys[which]})
			if wc.Status != rdmaio.StatusSuccess {
				t.Fatalf("write %d bytes into %s memory: %v (vendor %d)", n, name, wc.Status, wc.VendorErr)
			}
			if r := string(e.call(cmdCheck, uint64(which), seed, uint64(n))); r != "ok" {
				t.Fatalf("peer finds %d bytes written into its %s memory %s", n, name, r)
			}
			// The peer fills, we READ.
			seed++
			if r := string(e.call(cmdFill, uint64(which), seed, uint64(n))); r != "ok" {
				t.Fatalf("fill: %s", r)
			}
			clear(e.bufs[0].Bytes()[:n])
			wc = e.post(e.rc, rdmaio.SendWR{Opcode: rdmaio.OpRDMARead, SGL: []rdmaio.SGE{rdmaio.MRSGE(e.bufs[0], 0, n)},
				RemoteAddr: e.peer.addrs[which], RKey: e.peer.keys[which]})
			if wc.Status != rdmaio.StatusSuccess || !hasPattern(e.bufs[0].Bytes()[:n], seed) {
				t.Fatalf("read %d bytes of %s memory: %v", n, name, wc.Status)
			}
			// The peer SENDs that much from that memory.
			seed++
			if _, err := e.data.PostRecv([]rdmaio.RecvWR{{ID: 1 << 41, SGL: []rdmaio.SGE{rdmaio.MRSGE(e.bufs[1-which], 0, n)}}}); err != nil {
				t.Fatal(err)
			}
			e.send(cmdSend, binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, uint64(which)), seed), uint64(n)))
			got := e.take(func(c *rdmaio.WorkCompletion) bool { return c.ID == 1<<41 })
			if got.Status != rdmaio.StatusSuccess || got.ByteLen != uint32(n) || !hasPattern(e.bufs[1-which].Bytes()[:n], seed) {
				t.Fatalf("%d-byte SEND from %s memory: %+v", n, name, *got)
			}
		}
	}
	// Atomics: our fetch-and-adds race with the peer's CPU atomics on its
	// counter.
	const adds = 2000
	e.send(cmdAdd, binary.LittleEndian.AppendUint64(nil, adds))
	for i := 0; i < adds; i++ {
		wc := e.post(e.rc, rdmaio.SendWR{Opcode: rdmaio.OpAtomicFetchAdd, CompareAdd: 1, SGL: []rdmaio.SGE{rdmaio.MRSGE(e.bufs[1], 0, 8)},
			RemoteAddr: e.peer.addrs[2], RKey: e.peer.keys[2]})
		if wc.Status != rdmaio.StatusSuccess {
			t.Fatalf("fetch-and-add: %v", wc.Status)
		}
	}
	if _, r := e.recv(); string(r) != "ok" {
		t.Fatalf("peer adds: %s", r)
	}
	wc := e.post(e.rc, rdmaio.SendWR{Opcode: rdmaio.OpRDMARead, SGL: []rdmaio.SGE{rdmaio.MRSGE(e.bufs[1], 0, 8)},
		RemoteAddr: e.peer.addrs[2], RKey: e.peer.keys[2]})
	if v := binary.NativeEndian.Uint64(e.bufs[1].Bytes()); wc.Status != rdmaio.StatusSuccess || v != 2*adds {
		t.Fatalf("counter %d (%v), want %d", v, wc.Status, 2*adds)
	}
	// UD both ways.
	e.send(cmdUD, nil)
	dg := e.take(func(c *rdmaio.WorkCompletion) bool { return c.QPN == e.ud.QPN() })
	if dg.Status != rdmaio.StatusSuccess || dg.Imm != 77 || dg.SrcQPN != e.peer.udQPN || dg.SrcRank != 1 {
		t.Fatalf("datagram from the peer: %+v", *dg)
	}
	// Stop: the peer closes its device and exits; its segments are gone.
	e.send(cmdStop, nil)
	if l := c.line(t); l != "bye" {
		t.Fatalf("helper says %q", l)
	}
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	if err := e.dev.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if left, _ := shm.Leftovers("", job); len(left) != 0 {
		t.Fatalf("segments left: %v", left)
	}
}

// TestCrossProcessCrash: when the peer process dies without closing
// anything, outstanding work completes with RETRY_EXC_ERR; the dead peer's
// segments that this process mapped were unlinked at that moment, and
// Cleanup removes the rest (an allocation nobody mapped).
func TestCrossProcessCrash(t *testing.T) {
	e, c, job := startPair(t, "commands")
	// Map the peer's shared allocation too (and so unlink it).
	if wc := e.post(e.rc, rdmaio.SendWR{Opcode: rdmaio.OpRDMARead, SGL: []rdmaio.SGE{rdmaio.MRSGE(e.bufs[1], 0, 8)},
		RemoteAddr: e.peer.addrs[0], RKey: e.peer.keys[0]}); wc.Status != rdmaio.StatusSuccess {
		t.Fatalf("read: %v", wc.Status)
	}
	e.send(cmdCrash, nil)
	var werr *exec.ExitError
	if err := c.cmd.Wait(); !errors.As(err, &werr) || werr.ExitCode() != 3 {
		t.Fatalf("helper exit: %v", err)
	}
	// The peer will never consume this SEND nor post a receive.
	if _, err := e.rc.PostSend([]rdmaio.SendWR{{ID: 5, Opcode: rdmaio.OpSend, Inline: []byte("anyone?"), Flags: rdmaio.SendSignaled}}); err != nil {
		t.Fatal(err)
	}
	// The send fails; the control receives are flushed with the QP.
	var sc *rdmaio.WorkCompletion
	for sc == nil {
		for _, w := range e.wait() {
			if !w.Opcode.IsRecv() {
				sc = &w
			}
		}
	}
	if sc.ID != 5 || sc.Status != rdmaio.StatusRetryExcErr {
		t.Fatalf("send to a dead peer: %+v", *sc)
	}
	left, err := shm.Leftovers("", job)
	if err != nil {
		t.Fatal(err)
	}
	var dead []string
	for _, s := range left {
		if s.Pid == c.cmd.Process.Pid {
			dead = append(dead, s.Path)
			if s.Alive {
				t.Errorf("%s: creator reported alive", s.Path)
			}
			if strings.HasSuffix(s.Path, "-main") || strings.HasSuffix(s.Path, "-a1") {
				t.Errorf("%s was mapped by this process and should be unlinked", s.Path)
			}
		}
	}
	removed, err := shm.Cleanup("", job, false)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(removed) != fmt.Sprint(dead) {
		t.Errorf("Cleanup removed %v, want the dead peer's %v", removed, dead)
	}
	if err := e.dev.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if left, _ := shm.Leftovers("", job); len(left) != 0 {
		t.Errorf("left after close and cleanup: %v", left)
	}
}
