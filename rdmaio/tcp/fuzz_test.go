package tcp

import (
	"bytes"
	"encoding/binary"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
)

// The wire decoders take input from the network. The fuzz targets check
// that they never panic, that what they accept re-encodes to the same bytes,
// and (FuzzConnInput) that a connection fed arbitrary bytes only ever
// produces completions and errors. Seed corpora are in testdata/fuzz.

// FuzzFrame: RC frame headers.
func FuzzFrame(f *testing.F) {
	for _, fr := range seedFrames() {
		var b [hdrMax]byte
		n := fr.encode(b[:])
		f.Add(b[:n])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr frame
		if fr.decode(b) != nil {
			return
		}
		var out [hdrMax]byte
		n := fr.encode(out[:])
		if !bytes.Equal(out[:n], b) {
			t.Fatalf("decode/encode of %x gives %x", b, out[:n])
		}
		if fr.payload() > maxMsgSize {
			t.Fatalf("accepted a payload of %d bytes", fr.payload())
		}
	})
}

// FuzzHandshake: greeting, challenge, hello and reply.
func FuzzHandshake(f *testing.F) {
	var b [helloLen]byte
	encodeGreeting(b[:greetingLen])
	f.Add(append([]byte(nil), b[:greetingLen]...))
	(&challenge{devID: 7}).encode(b[:challengeLen])
	f.Add(append([]byte(nil), b[:challengeLen]...))
	(&hello{fromDev: 1, toDev: 2, fromRank: 3, fromQPN: 4, toQPN: 5}).encode(b[:])
	f.Add(append([]byte(nil), b[:]...))
	encodeReply(b[:replyLen], replyOK, &[32]byte{1})
	f.Add(append([]byte(nil), b[:replyLen]...))
	f.Fuzz(func(t *testing.T, b []byte) {
		var out [helloLen]byte
		if decodeGreeting(b) == nil {
			encodeGreeting(out[:greetingLen])
			if !bytes.Equal(out[:greetingLen], b) {
				t.Fatalf("greeting %x re-encodes to %x", b, out[:greetingLen])
			}
		}
		var c challenge
		if c.decode(b) == nil {
			c.encode(out[:challengeLen])
			if !bytes.Equal(out[:challengeLen], b) {
				t.Fatalf("challenge %x re-encodes to %x", b, out[:challengeLen])
			}
		}
		var h hello
		if h.decode(b) == nil {
			h.encode(out[:])
			if !bytes.Equal(out[:], b) {
				t.Fatalf("hello %x re-encodes to %x", b, out[:])
			}
		}
		if st, mac, err := decodeReply(b); err == nil {
			encodeReply(out[:replyLen], st, &mac)
			if !bytes.Equal(out[:replyLen], b) {
				t.Fatalf("reply %x re-encodes to %x", b, out[:replyLen])
			}
		}
	})
}

// FuzzUDHeader: UD datagrams.
func FuzzUDHeader(f *testing.F) {
	var b [udHdrLen + 4]byte
	(&udHeader{flags: udImm, srcRank: 1, token: 2, dstDev: 3, srcQPN: 4, dstQPN: 5, qkey: 6, imm: 7}).encode(b[:])
	copy(b[udHdrLen:], "data")
	f.Add(b[:])
	f.Fuzz(func(t *testing.T, b []byte) {
		var h udHeader
		p, err := h.decode(b)
		if err != nil {
			return
		}
		var out [udHdrLen]byte
		h.encode(out[:])
		if !bytes.Equal(out[:], b[:udHdrLen]) || len(p) != len(b)-udHdrLen {
			t.Fatalf("datagram %x re-encodes to %x", b, out)
		}
	})
}

// FuzzAddr: device address blobs (they come from other ranks' cards).
func FuzzAddr(f *testing.F) {
	d, err := Open(rdmaio.Config{Job: "fuzz"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(d.Addr())
	d.Close()
	f.Add([]byte("JTA1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeAddr(b)
		if err != nil {
			return
		}
		if out := a.encode(); !bytes.Equal(out, b) {
			t.Fatalf("address %x re-encodes to %x", b, out)
		}
	})
}

// The rig's target region: its key (the first of a device) and address.
const (
	fuzzKey  = 1<<8 | 1
	fuzzBase = 0x600000000000
)

// hint returns a as the address hint of mmap (not a Go pointer: the memory
// there is outside the Go heap, or nothing).
func hint(a uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&a)) }

// fuzzRig is a device with an RC QP whose connection is one end of a
// socket pair: the fuzzer writes arbitrary bytes into the other end.
type fuzzRig struct {
	d     *Device
	pd    rdmaio.PD
	cq    rdmaio.CQ
	q     *qp
	mr    rdmaio.MR
	local rdmaio.MR
	peer  int
	wc    []rdmaio.WorkCompletion
}

var (
	rigOnce sync.Once
	rig     *fuzzRig
	rigErr  error
)

func getRig() (*fuzzRig, error) {
	rigOnce.Do(func() {
		r := &fuzzRig{peer: -1, wc: make([]rdmaio.WorkCompletion, 64)}
		if r.d, rigErr = Open(rdmaio.Config{Job: "fuzz", Rank: 0}); rigErr != nil {
			return
		}
		if r.pd, rigErr = r.d.AllocPD(); rigErr != nil {
			return
		}
		if r.cq, rigErr = r.d.CreateCQ(1024); rigErr != nil {
			return
		}
		q, err := r.pd.CreateQP(rdmaio.QPInitAttr{Type: rdmaio.RC, SendCQ: r.cq, RecvCQ: r.cq, Cap: rdmaio.QPCap{MaxSendWR: 16, MaxRecvWR: 16}})
		if rigErr = err; err != nil {
			return
		}
		r.q = q.(*qp)
		// The target region sits at a fixed address when possible, so that
		// the seed corpus can name it (rkey fuzzKey, address fuzzBase).
		mem := make([]byte, 4096)
		if p, err := unix.MmapPtr(-1, 0, hint(fuzzBase), 4096, unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE); err == nil {
			mem = unsafe.Slice((*byte)(p), 4096)
		}
		if r.mr, rigErr = r.pd.RegMR(mem, rdmaio.AccessAll); rigErr != nil {
			return
		}
		r.local, rigErr = r.pd.RegMR(make([]byte, 4096), rdmaio.AccessLocalWrite)
		rig = r
	})
	return rig, rigErr
}

// reset connects the QP to a fresh socket pair, posts receives and a few
// requests (so that responses have something to match).
func (r *fuzzRig) reset(t *testing.T) {
	q := r.q
	if r.peer >= 0 {
		unix.Close(r.peer)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.peer = fds[1]
	q.mu.Lock()
	q.resetLocked()
	q.access = rdmaio.AccessRemote
	c := r.d.newConn(fds[0], kRC, q)
	if c == nil {
		q.mu.Unlock()
		t.Fatal("connection table full")
	}
	q.dest, q.destQPN = peerAddr{rank: 1, devID: 2}, 77
	q.psnBase, q.sqHigh, q.rexp, q.rdead = q.sqTail, q.sqTail, 0, false
	q.state.Store(uint32(rdmaio.StateRTS))
	q.bound = time.Hour // the fuzzer never answers: keep the retry timer away
	q.attach(c)
	q.mu.Unlock()
	for i := 0; i < 4; i++ {
		if _, err := q.PostRecv([]rdmaio.RecvWR{{ID: uint64(i), SGL: []rdmaio.SGE{rdmaio.MRSGE(r.local, 64*i, 64)}}}); err != nil {
			t.Fatal(err)
		}
	}
	sge := func(off, n int) []rdmaio.SGE { return []rdmaio.SGE{rdmaio.MRSGE(r.local, off, n)} }
	if _, err := q.PostSend([]rdmaio.SendWR{
		{ID: 10, Opcode: rdmaio.OpSend, SGL: sge(0, 8), Flags: rdmaio.SendSignaled},
		{ID: 11, Opcode: rdmaio.OpRDMARead, SGL: sge(1024, 100), RemoteAddr: 1 << 20, RKey: 5},
		{ID: 12, Opcode: rdmaio.OpAtomicFetchAdd, SGL: sge(2048, 8), RemoteAddr: 1 << 20, RKey: 5},
		{ID: 13, Opcode: rdmaio.OpRDMAWrite, SGL: sge(0, 16), RemoteAddr: 1 << 20, RKey: 5, Flags: rdmaio.SendSignaled},
	}); err != nil {
		t.Fatal(err)
	}
	r.drainPeer()
}

// drainPeer discards what the QP wrote.
func (r *fuzzRig) drainPeer() {
	var buf [4096]byte
	for {
		if n, err := unix.Read(r.peer, buf[:]); n <= 0 || err != nil {
			return
		}
	}
}

// FuzzConnInput feeds arbitrary bytes to a connected QP, as a hostile or
// broken peer would send them.
func FuzzConnInput(f *testing.F) {
	for _, s := range seedStreams() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := getRig()
		if err != nil {
			t.Fatal(err)
		}
		r.reset(t)
		q, d := r.q, r.d
		for len(data) > 0 {
			n, err := unix.Write(r.peer, data)
			if err != nil && err != unix.EAGAIN {
				break
			}
			data = data[max(n, 0):]
			d.pmu.Lock()
			q.mu.Lock()
			c := q.conn
			if c != nil {
				q.connReady(c, unix.EPOLLIN)
			}
			q.mu.Unlock()
			d.pmu.Unlock()
			r.drainPeer()
			if c == nil {
				break
			}
		}
		for r.cq.Poll(r.wc) > 0 {
		}
		if m := r.mr.(*mr); m.inuse.Load() != 0 {
			q.mu.Lock()
			busy := q.conn != nil
			q.mu.Unlock()
			if !busy {
				t.Fatalf("region held (%d) after the connection is gone", m.inuse.Load())
			}
		}
	})
}

// seedFrames are well-formed frames of every type.
func seedFrames() []frame {
	return []frame{
		{typ: fSend, psn: 0, length: 8},
		{typ: fSendImm, flags: flAckReq, psn: 1, length: 3, imm: 9},
		{typ: fWrite, psn: 2, length: 16, rkey: 0x100, raddr: 0x1000},
		{typ: fWriteImm, psn: 3, length: 4, imm: 1, rkey: 0x100, raddr: 0x1000},
		{typ: fRead, psn: 4, length: 32, rkey: 0x100, raddr: 0x1000},
		{typ: fCmpSwp, psn: 5, length: 8, rkey: 0x100, raddr: 0x1000, a: 1, b: 2},
		{typ: fFetchAdd, psn: 6, length: 8, rkey: 0x100, raddr: 0x1000, a: 1},
		{typ: fAck, psn: 0},
		{typ: fNak, psn: 1, status: rdmaio.StatusRNRRetryExcErr, imm: 1000},
		{typ: fNak, psn: 1, status: rdmaio.StatusRemAccessErr},
		{typ: fReadResp, psn: 1, length: 100},
		{typ: fAtomicRsp, psn: 2, length: 8, a: 42},
	}
}

// seedStreams are request and response sequences a peer of the rig could
// send: requests on the rig's region (the last out of bounds) and
// responses to the rig's own requests.
func seedStreams() [][]byte {
	put := func(b []byte, f frame, payload int) []byte {
		var h [hdrMax]byte
		n := f.encode(h[:])
		b = append(b, h[:n]...)
		return append(b, bytes.Repeat([]byte{0xab}, payload)...)
	}
	var out [][]byte
	// Requests: SEND, SEND with immediate, WRITE, READ, atomics.
	var s []byte
	s = put(s, frame{typ: fSend, psn: 0, length: 8}, 8)
	s = put(s, frame{typ: fSendImm, flags: flAckReq, psn: 1, length: 64, imm: 5}, 64)
	s = put(s, frame{typ: fWrite, psn: 2, length: 16, rkey: fuzzKey, raddr: fuzzBase + 16}, 16)
	s = put(s, frame{typ: fRead, psn: 3, length: 32, rkey: fuzzKey, raddr: fuzzBase + 8}, 0)
	s = put(s, frame{typ: fFetchAdd, psn: 4, length: 8, rkey: fuzzKey, raddr: fuzzBase + 64, a: 1}, 0)
	s = put(s, frame{typ: fCmpSwp, psn: 5, length: 8, rkey: fuzzKey, raddr: fuzzBase + 64, a: 1, b: 9}, 0)
	s = put(s, frame{typ: fWriteImm, psn: 6, length: 4, imm: 3, rkey: fuzzKey, raddr: fuzzBase + 4092}, 4)
	s = put(s, frame{typ: fWrite, psn: 7, length: 16, rkey: fuzzKey, raddr: fuzzBase + 4090}, 16)
	out = append(out, s)
	// Responses to the rig's requests: ACK of the SEND, READ response,
	// atomic response, ACK of the WRITE.
	s = nil
	s = put(s, frame{typ: fAck, psn: 0}, 0)
	s = put(s, frame{typ: fReadResp, psn: 1, length: 100}, 100)
	s = put(s, frame{typ: fAtomicRsp, psn: 2, length: 8, a: 7}, 0)
	s = put(s, frame{typ: fAck, psn: 3}, 0)
	out = append(out, s)
	// RNR NAK, then an error NAK.
	s = nil
	s = put(s, frame{typ: fNak, psn: 0, status: rdmaio.StatusRNRRetryExcErr, imm: 10}, 0)
	s = put(s, frame{typ: fNak, psn: 0, status: rdmaio.StatusRemAccessErr}, 0)
	out = append(out, s)
	// A large SEND (read straight into the receive buffer, and too long).
	s = put(nil, frame{typ: fSend, psn: 0, length: 40000}, 40000)
	out = append(out, s)
	// A frame cut in the middle.
	var h [hdrMax]byte
	n := (&frame{typ: fWrite, psn: 0, length: 16, rkey: 1, raddr: 2}).encode(h[:])
	out = append(out, append([]byte(nil), h[:n-5]...))
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], 0xdeadbeef)
	out = append(out, w[:])
	return out
}

// TestConnInputSeeds checks that the rig works: the first seed's requests
// reach the region (when it could be mapped at fuzzBase), complete
// receives, and the out-of-bounds write at the end makes the responder
// refuse what follows.
func TestConnInputSeeds(t *testing.T) {
	r, err := getRig()
	if err != nil {
		t.Fatal(err)
	}
	if r.mr.Addr() != fuzzBase {
		t.Skip("the region could not be mapped at its fixed address")
	}
	r.reset(t)
	clear(r.mr.Bytes())
	if _, err := unix.Write(r.peer, seedStreams()[0]); err != nil {
		t.Fatal(err)
	}
	r.d.pmu.Lock()
	r.q.mu.Lock()
	r.q.connReady(r.q.conn, unix.EPOLLIN)
	r.q.mu.Unlock()
	r.d.pmu.Unlock()
	b := r.mr.Bytes()
	if !bytes.Equal(b[16:32], bytes.Repeat([]byte{0xab}, 16)) || binary.NativeEndian.Uint64(b[64:]) != 9 ||
		!bytes.Equal(b[4092:], []byte{0xab, 0xab, 0xab, 0xab}) {
		t.Fatalf("region after the seed: % x … % x … % x", b[16:32], b[64:72], b[4088:])
	}
	n := r.cq.Poll(r.wc)
	if n != 3 || r.wc[0].ID != 0 || r.wc[1].ByteLen != 64 || r.wc[2].Opcode != rdmaio.WCRecvRDMAWithImm {
		t.Fatalf("completions %+v", r.wc[:n])
	}
	r.q.mu.Lock()
	defer r.q.mu.Unlock()
	if !r.q.rdead || r.q.rexp != 7 {
		t.Fatalf("after an out-of-bounds write the responder is not refusing (next PSN %d)", r.q.rexp)
	}
}
