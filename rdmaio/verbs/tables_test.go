package verbs

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jiarun/jia/rdmaio"
)

func TestAccessAndSendFlags(t *testing.T) {
	if got := accessFlags(rdmaio.AccessAll | 1<<7); got != 0xf {
		t.Fatalf("accessFlags(all|unknown) = %#x, want 0xf", got)
	}
	if got := accessFlags(rdmaio.AccessLocalWrite | rdmaio.AccessRemoteRead); got != 1|4 {
		t.Fatalf("accessFlags = %#x", got)
	}
	cases := []struct {
		f              rdmaio.SendFlags
		inline, sigAll bool
		want           uint32
	}{
		{0, false, false, 0},
		{rdmaio.SendSignaled, false, false, ibvSendSignaled},
		{0, false, true, ibvSendSignaled},
		{rdmaio.SendFence | rdmaio.SendSolicited, true, false, ibvSendFence | ibvSendSolicited | ibvSendInline},
	}
	for _, c := range cases {
		if got := sendFlags(c.f, c.inline, c.sigAll); got != c.want {
			t.Errorf("sendFlags(%v, %v, %v) = %#x, want %#x", c.f, c.inline, c.sigAll, got, c.want)
		}
	}
}

func TestWCStatusAndOpcode(t *testing.T) {
	for s := uint32(0); s < 40; s++ {
		got := wcStatus(s)
		named := !strings.HasPrefix(rdmaio.Status(s).String(), "Status(")
		switch {
		case named && got != rdmaio.Status(s):
			t.Errorf("wcStatus(%d) = %v, want %v", s, got, rdmaio.Status(s))
		case !named && got != rdmaio.StatusGeneralErr:
			t.Errorf("wcStatus(%d) (unnamed in rdmaio) = %v, want GENERAL_ERR", s, got)
		}
	}
	if wcStatus(1<<20) != rdmaio.StatusGeneralErr {
		t.Error("large status not mapped to GENERAL_ERR")
	}
	if recvOpcode(129) != rdmaio.WCRecvRDMAWithImm || recvOpcode(128) != rdmaio.WCRecv {
		t.Error("receive opcodes")
	}
}

func TestMTU(t *testing.T) {
	want := map[uint8]int{0: 0, 1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096, 6: 0}
	for m, n := range want {
		if mtuBytes(m) != n {
			t.Errorf("mtuBytes(%d) = %d, want %d", m, mtuBytes(m), n)
		}
	}
}

func TestRNRTimerCode(t *testing.T) {
	cases := []struct {
		d    time.Duration
		want uint8
	}{
		{0, 14}, // 1 ms → 1.28 ms
		{time.Nanosecond, 1},
		{10 * time.Microsecond, 1},
		{11 * time.Microsecond, 2},
		{time.Millisecond, 14},
		{1280 * time.Microsecond, 14},
		{491520 * time.Microsecond, 31},
		{500 * time.Millisecond, 0},
		{time.Hour, 0},
	}
	for _, c := range cases {
		got := rnrTimerCode(c.d)
		if got != c.want {
			t.Errorf("rnrTimerCode(%v) = %d, want %d", c.d, got, c.want)
		}
		if c.d > 0 && rnrTimerTable[got] < c.d && got != 0 {
			t.Errorf("rnrTimerCode(%v) = %d, a shorter delay", c.d, got)
		}
	}
	for i := 2; i < 32; i++ {
		if rnrTimerTable[i] <= rnrTimerTable[i-1] {
			t.Fatalf("RNR table not increasing at %d", i)
		}
	}
}

func TestTimeoutCode(t *testing.T) {
	cases := []struct {
		d    time.Duration
		want uint8
	}{
		{0, defaultTimeoutCode},
		{time.Nanosecond, 1},
		{8192 * time.Nanosecond, 1},
		{8193 * time.Nanosecond, 2},
		{67 * time.Millisecond, 14},
		{68 * time.Millisecond, 15},
		{time.Hour, 30},
		{3 * time.Hour, 31},
	}
	for _, c := range cases {
		if got := timeoutCode(c.d); got != c.want {
			t.Errorf("timeoutCode(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

// TestModifySpec checks the attribute masks of each transition against
// what verbs requires (IB spec table "QP state transition attributes").
func TestModifySpec(t *testing.T) {
	local, peer := ibAddr(), ibAddr()
	peer.lid, peer.mtu = 0x40, 3
	rc, ud := rdmaio.RC, rdmaio.UD
	cases := []struct {
		name string
		t    rdmaio.QPType
		cur  rdmaio.QPState
		attr rdmaio.QPAttr
		peer *portAddr
		mask uint32
	}{
		{"RC RESET→INIT", rc, rdmaio.StateReset, rdmaio.QPAttr{State: rdmaio.StateInit, Access: rdmaio.AccessRemote}, nil,
			ibvQPState | ibvQPPKeyIndex | ibvQPPort | ibvQPAccessFlags},
		{"UD RESET→INIT", ud, rdmaio.StateReset, rdmaio.QPAttr{State: rdmaio.StateInit, QKey: 0x11}, nil,
			ibvQPState | ibvQPPKeyIndex | ibvQPPort | ibvQPQKey},
		{"RC INIT→RTR", rc, rdmaio.StateInit, rdmaio.QPAttr{State: rdmaio.StateRTR, DestQPN: 77}, &peer,
			ibvQPState | ibvQPAV | ibvQPPathMTU | ibvQPDestQPN | ibvQPRQPSN | ibvQPMaxDestRdAtomic | ibvQPMinRNRTimer},
		{"UD INIT→RTR", ud, rdmaio.StateInit, rdmaio.QPAttr{State: rdmaio.StateRTR}, nil, ibvQPState},
		{"RC RTR→RTS", rc, rdmaio.StateRTR, rdmaio.QPAttr{State: rdmaio.StateRTS, RetryCount: 7, RNRRetry: 7}, nil,
			ibvQPState | ibvQPSQPSN | ibvQPTimeout | ibvQPRetryCnt | ibvQPRNRRetry | ibvQPMaxQPRdAtomic},
		{"UD RTR→RTS", ud, rdmaio.StateRTR, rdmaio.QPAttr{State: rdmaio.StateRTS}, nil, ibvQPState | ibvQPSQPSN},
		{"RC RTS→RTS", rc, rdmaio.StateRTS, rdmaio.QPAttr{State: rdmaio.StateRTS}, nil, ibvQPState},
		{"RC →ERR", rc, rdmaio.StateRTS, rdmaio.QPAttr{State: rdmaio.StateErr}, nil, ibvQPState},
		{"UD →RESET", ud, rdmaio.StateErr, rdmaio.QPAttr{State: rdmaio.StateReset}, nil, ibvQPState},
	}
	for _, c := range cases {
		s, err := modifySpec(c.t, c.cur, &c.attr, &local, c.peer, 32, 8)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if s.mask != c.mask || s.state != c.attr.State {
			t.Errorf("%s: mask %#x state %v, want %#x %v", c.name, s.mask, s.state, c.mask, c.attr.State)
		}
		switch c.name {
		case "RC RESET→INIT":
			if s.access != 0xe || s.port != 1 {
				t.Errorf("%s: %+v", c.name, s)
			}
		case "UD RESET→INIT":
			if s.qkey != 0x11 || s.port != 1 {
				t.Errorf("%s: %+v", c.name, s)
			}
		case "RC INIT→RTR":
			if s.destQPN != 77 || s.pathMTU != 3 || s.ah.dlid != 0x40 || s.minRNRTimer != 14 || s.maxDestRdAtomic != 16 {
				t.Errorf("%s: %+v", c.name, s)
			}
		case "RC RTR→RTS":
			if s.retryCnt != 7 || s.rnrRetry != 7 || s.timeout != defaultTimeoutCode || s.maxRdAtomic != 8 {
				t.Errorf("%s: %+v", c.name, s)
			}
		}
	}
	if _, err := modifySpec(rc, rdmaio.StateInit, &rdmaio.QPAttr{State: rdmaio.StateRTR, DestQPN: 1}, &local, nil, 1, 1); !errors.Is(err, rdmaio.ErrInvalidArgument) {
		t.Errorf("RTR without a peer: %v", err)
	}
	other := roceAddr()
	if _, err := modifySpec(rc, rdmaio.StateInit, &rdmaio.QPAttr{State: rdmaio.StateRTR, DestQPN: 1}, &local, &other, 1, 1); !errors.Is(err, rdmaio.ErrBadAddress) {
		t.Errorf("RTR to another link layer: %v", err)
	}
}

func gidOf(b ...byte) [16]byte {
	var g [16]byte
	copy(g[16-len(b):], b)
	return g
}

func TestSelectGID(t *testing.T) {
	v4 := gidOf(0xff, 0xff, 10, 0, 0, 1)
	global := [16]byte{0x20, 0x01, 0x0d, 0xb8, 15: 1}
	link := [16]byte{0xfe, 0x80, 15: 2}
	table := []gidEntry{
		{0, link, gidTypeRoCEv1},
		{1, link, gidTypeRoCEv2},
		{2, global, gidTypeRoCEv2},
		{3, v4, gidTypeRoCEv1},
		{4, v4, gidTypeRoCEv2},
		{5, [16]byte{}, gidTypeRoCEv2},
	}
	pick := func(tb []gidEntry, want int) int {
		e, err := selectGID(linkEthernet, tb, want)
		if err != nil {
			t.Fatalf("selectGID: %v", err)
		}
		return e.index
	}
	if got := pick(table, -1); got != 4 {
		t.Errorf("RoCE v2 IPv4: picked %d", got)
	}
	if got := pick(table[:4], -1); got != 2 {
		t.Errorf("RoCE v2 global IPv6: picked %d", got)
	}
	if got := pick(table[:2], -1); got != 1 {
		t.Errorf("RoCE v2 link-local: picked %d", got)
	}
	if got := pick(table[:1], -1); got != 0 {
		t.Errorf("RoCE v1: picked %d", got)
	}
	if got := pick(table, 3); got != 3 {
		t.Errorf("gid_index 3: picked %d", got)
	}
	if _, err := selectGID(linkEthernet, table, 5); !errors.Is(err, rdmaio.ErrInvalidArgument) {
		t.Errorf("empty entry chosen by index: %v", err)
	}
	if _, err := selectGID(linkEthernet, table[5:], -1); !errors.Is(err, ErrNoDevice) {
		t.Errorf("no usable RoCE GID: %v", err)
	}
	ib := []gidEntry{{0, [16]byte{0xfe, 0x80, 15: 9}, gidTypeIB}, {1, global, gidTypeIB}}
	if e, err := selectGID(linkInfiniBand, ib, -1); err != nil || e.index != 0 {
		t.Errorf("InfiniBand: %+v, %v", e, err)
	}
}

func TestGRHSourceGID(t *testing.T) {
	grh := make([]byte, grhLen)
	grh[0] = 0x60 // IPv6 version
	src := [16]byte{0x20, 0x01, 15: 5}
	copy(grh[8:], src[:])
	if got := grhSourceGID(grh); got != src {
		t.Fatalf("GRH source %x, want %x", got, src)
	}
	// RoCE v2 over IPv4: the first 20 bytes are zero, an IPv4 header follows.
	v4 := make([]byte, grhLen)
	v4[20] = 0x45
	copy(v4[32:], []byte{192, 168, 1, 9})
	if got := grhSourceGID(v4); got != gidOf(0xff, 0xff, 192, 168, 1, 9) {
		t.Fatalf("IPv4 source %x", got)
	}
	if got := grhSourceGID(v4[:10]); got != ([16]byte{}) {
		t.Fatalf("short header gave %x", got)
	}
}

func TestParseOptions(t *testing.T) {
	o, err := parseOptions(map[string]string{"device": "mlx5_1", "port": "2", "gid_index": "3", "max_inline": "64",
		"spin": "0s", "yield": "10us", "sleep": "2ms"}, 4)
	if err != nil {
		t.Fatal(err)
	}
	if o.device != "mlx5_1" || o.port != 2 || o.gidIndex != 3 || o.maxInline != 64 || o.policy.Spin != 0 ||
		o.policy.Yield != 10*time.Microsecond || o.policy.Sleep != 2*time.Millisecond {
		t.Fatalf("options %+v", o)
	}
	d, err := parseOptions(nil, 1)
	if err != nil || d.gidIndex != -1 || d.port != 0 || d.maxInline != DefaultMaxInline || d.policy.Sleep <= 0 {
		t.Fatalf("defaults %+v, %v", d, err)
	}
	for _, bad := range []map[string]string{{"nope": "1"}, {"port": "256"}, {"gid_index": "-1"}, {"spin": "-1s"}, {"sleep": "0s"}, {"max_inline": "x"}} {
		if _, err := parseOptions(bad, 1); !errors.Is(err, rdmaio.ErrInvalidArgument) {
			t.Errorf("options %v: %v", bad, err)
		}
	}
}

func TestErrors(t *testing.T) {
	if err := postError("post", syscall.ENOMEM); !errors.Is(err, rdmaio.ErrQueueFull) {
		t.Errorf("ENOMEM: %v", err)
	}
	if err := postError("post", syscall.EINVAL); !errors.Is(err, rdmaio.ErrInvalidArgument) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("EINVAL: %v", err)
	}
	if err := regError(1<<20, syscall.ENOMEM); !strings.Contains(err.Error(), "RLIMIT_MEMLOCK") || !errors.Is(err, syscall.ENOMEM) {
		t.Errorf("registration ENOMEM: %v", err)
	}
	for _, e := range []syscall.Errno{0, syscall.ENOSYS, syscall.EACCES} {
		err := noDeviceError(e)
		if !errors.Is(err, ErrNoDevice) || !errors.Is(err, rdmaio.ErrNoDevice) || !strings.HasPrefix(err.Error(), "no RDMA device") {
			t.Errorf("noDeviceError(%v) = %v", e, err)
		}
	}
}

// TestLearn: a port address names a rank until a second rank shows up with
// the same address (ranks sharing an adapter), then none.
func TestLearn(t *testing.T) {
	m := map[uint16]int32{}
	m[1] = learn(m, 1, 4)
	m[1] = learn(m, 1, 4)
	if m[1] != 4 {
		t.Fatalf("same rank twice: %d", m[1])
	}
	m[1] = learn(m, 1, 5)
	if m[1] != -1 {
		t.Fatalf("two ranks on one port: %d", m[1])
	}
	m[1] = learn(m, 1, 4)
	if m[1] != -1 {
		t.Fatalf("ambiguity forgotten: %d", m[1])
	}
}
