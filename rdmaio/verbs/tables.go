package verbs

import (
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/jiarun/jia/rdmaio"
)

// Values of libibverbs enums, kept here (without cgo) so that the mapping
// logic is testable in every build; a test of the verbs build checks each
// against verbs.h.
const (
	// enum ibv_qp_attr_mask
	ibvQPState           = 1 << 0
	ibvQPAccessFlags     = 1 << 3
	ibvQPPKeyIndex       = 1 << 4
	ibvQPPort            = 1 << 5
	ibvQPQKey            = 1 << 6
	ibvQPAV              = 1 << 7
	ibvQPPathMTU         = 1 << 8
	ibvQPTimeout         = 1 << 9
	ibvQPRetryCnt        = 1 << 10
	ibvQPRNRRetry        = 1 << 11
	ibvQPRQPSN           = 1 << 12
	ibvQPMaxQPRdAtomic   = 1 << 13
	ibvQPMinRNRTimer     = 1 << 15
	ibvQPSQPSN           = 1 << 16
	ibvQPMaxDestRdAtomic = 1 << 17
	ibvQPDestQPN         = 1 << 20

	// enum ibv_send_flags
	ibvSendFence     = 1 << 0
	ibvSendSignaled  = 1 << 1
	ibvSendSolicited = 1 << 2
	ibvSendInline    = 1 << 3

	// enum ibv_wc_flags
	ibvWCGRH     = 1 << 0
	ibvWCWithImm = 1 << 1

	// enum ibv_port_state
	ibvPortActive = 4

	// enum ibv_gid_type (struct ibv_gid_entry)
	gidTypeIB     = 0
	gidTypeRoCEv1 = 1
	gidTypeRoCEv2 = 2

	// grhLen is the size of the global routing header at the start of every
	// UD receive buffer.
	grhLen = 40
)

// accessFlags maps rdmaio access rights to IBV_ACCESS_* flags. The values
// coincide; the mapping masks unknown bits.
func accessFlags(a rdmaio.Access) uint32 { return uint32(a & rdmaio.AccessAll) }

// sendFlags maps rdmaio send flags to IBV_SEND_* flags, adding
// IBV_SEND_INLINE for inline requests and IBV_SEND_SIGNALED when every
// request is signaled.
func sendFlags(f rdmaio.SendFlags, inline, sigAll bool) uint32 {
	var v uint32
	if f&rdmaio.SendFence != 0 {
		v |= ibvSendFence
	}
	if f&rdmaio.SendSignaled != 0 || sigAll {
		v |= ibvSendSignaled
	}
	if f&rdmaio.SendSolicited != 0 {
		v |= ibvSendSolicited
	}
	if inline {
		v |= ibvSendInline
	}
	return v
}

// wcStatus maps an ibv_wc_status to rdmaio's Status. Statuses rdmaio does
// not name (memory windows, EE contexts, tag matching) become
// StatusGeneralErr; the vendor error keeps the detail.
func wcStatus(s uint32) rdmaio.Status {
	switch st := rdmaio.Status(s); st {
	case rdmaio.StatusSuccess, rdmaio.StatusLocLenErr, rdmaio.StatusLocQPOpErr, rdmaio.StatusLocProtErr,
		rdmaio.StatusWRFlushErr, rdmaio.StatusBadRespErr, rdmaio.StatusLocAccessErr, rdmaio.StatusRemInvReqErr,
		rdmaio.StatusRemAccessErr, rdmaio.StatusRemOpErr, rdmaio.StatusRetryExcErr, rdmaio.StatusRNRRetryExcErr,
		rdmaio.StatusRemAbortErr, rdmaio.StatusFatalErr, rdmaio.StatusRespTimeoutErr, rdmaio.StatusGeneralErr:
		if uint32(st) == s {
			return st
		}
	}
	return rdmaio.StatusGeneralErr
}

// recvOpcode maps the ibv_wc_opcode of a successful receive completion.
func recvOpcode(op uint32) rdmaio.WCOpcode {
	if op == uint32(rdmaio.WCRecvRDMAWithImm) {
		return rdmaio.WCRecvRDMAWithImm
	}
	return rdmaio.WCRecv
}

// mtuBytes returns the size of an IBV_MTU_* value, 0 for an unknown one.
func mtuBytes(m uint8) int {
	if m < 1 || m > 5 {
		return 0
	}
	return 128 << m
}

// rnrTimerCode encodes a minimum RNR NAK delay as the 5-bit IB code: the
// smallest delay of the table that is at least d. Zero means 1 ms (the
// rdmaio default); delays beyond the table take its largest, 655.36 ms.
func rnrTimerCode(d time.Duration) uint8 {
	if d == 0 {
		d = time.Millisecond
	}
	for code := 1; code < len(rnrTimerTable); code++ {
		if rnrTimerTable[code] >= d {
			return uint8(code)
		}
	}
	return 0
}

// rnrTimerTable is the IB encoding of the RNR NAK timer: code → delay
// (code 0 is the longest).
var rnrTimerTable = [32]time.Duration{
	655360 * time.Microsecond, 10 * time.Microsecond, 20 * time.Microsecond, 30 * time.Microsecond,
	40 * time.Microsecond, 60 * time.Microsecond, 80 * time.Microsecond, 120 * time.Microsecond,
	160 * time.Microsecond, 240 * time.Microsecond, 320 * time.Microsecond, 480 * time.Microsecond,
	640 * time.Microsecond, 960 * time.Microsecond, 1280 * time.Microsecond, 1920 * time.Microsecond,
	2560 * time.Microsecond, 3840 * time.Microsecond, 5120 * time.Microsecond, 7680 * time.Microsecond,
	10240 * time.Microsecond, 15360 * time.Microsecond, 20480 * time.Microsecond, 30720 * time.Microsecond,
	40960 * time.Microsecond, 61440 * time.Microsecond, 81920 * time.Microsecond, 122880 * time.Microsecond,
	163840 * time.Microsecond, 245760 * time.Microsecond, 327680 * time.Microsecond, 491520 * time.Microsecond,
}

// defaultTimeoutCode is the local ACK timeout used when QPAttr.Timeout is
// zero: 4.096 µs × 2^14 ≈ 67 ms.
const defaultTimeoutCode = 14

// timeoutCode encodes a local ACK timeout as the IB exponent t of
// 4.096 µs × 2^t: the smallest that is at least d, at most 31. Zero
// means the default.
func timeoutCode(d time.Duration) uint8 {
	if d == 0 {
		return defaultTimeoutCode
	}
	unit := 4096 * time.Nanosecond
	for t := uint8(1); t < 31; t++ {
		if unit<<t >= d {
			return t
		}
	}
	return 31
}

// maxRdAtomic bounds the outstanding RDMA READs and atomics of a QP (as
// initiator and responder) by the device's limit.
const maxRdAtomic = 16

// qpAttrSpec is what an ibv_modify_qp call sets (struct ibv_qp_attr), with
// the attribute mask.
type qpAttrSpec struct {
	mask             uint32
	state            rdmaio.QPState
	access           uint32
	qkey             uint32
	port             uint8
	pathMTU          uint8
	destQPN          uint32
	minRNRTimer      uint8
	timeout          uint8
	retryCnt         uint8
	rnrRetry         uint8
	maxRdAtomic      uint8
	maxDestRdAtomic  uint8
	ah               ahSpec
	rqPSN, sqPSN     uint32
	pkeyIndex        uint16
	deviceRdAtomic   int // the device's max_qp_rd_atom
	deviceInitAtomic int // the device's max_qp_init_rd_atom
}

// modifySpec builds the ibv_modify_qp arguments for a transition the state
// machine allows (provider.CheckTransition has passed). local is this port;
// peer, for INIT → RTR of an RC QP, the decoded Dest address.
func modifySpec(t rdmaio.QPType, cur rdmaio.QPState, attr *rdmaio.QPAttr, local, peer *portAddr, rdAtom, initRdAtom int) (qpAttrSpec, error) {
	s := qpAttrSpec{mask: ibvQPState, state: attr.State}
	to := attr.State
	switch {
	case to == rdmaio.StateInit:
		s.mask |= ibvQPPKeyIndex | ibvQPPort
		s.port = local.port
		if t == rdmaio.RC {
			s.mask |= ibvQPAccessFlags
			s.access = accessFlags(attr.Access)
		} else {
			s.mask |= ibvQPQKey
			s.qkey = attr.QKey
		}
	case to == rdmaio.StateRTR && t == rdmaio.RC:
		if peer == nil {
			return s, fmt.Errorf("%w: INIT → RTR of an RC QP needs Dest", rdmaio.ErrInvalidArgument)
		}
		ah, err := ahFor(local, peer)
		if err != nil {
			return s, err
		}
		s.mask |= ibvQPAV | ibvQPPathMTU | ibvQPDestQPN | ibvQPRQPSN | ibvQPMaxDestRdAtomic | ibvQPMinRNRTimer
		s.ah = ah
		s.pathMTU = min(local.mtu, peer.mtu)
		s.destQPN = attr.DestQPN
		s.minRNRTimer = rnrTimerCode(attr.MinRNRTimer)
		s.maxDestRdAtomic = uint8(max(1, min(rdAtom, maxRdAtomic)))
	case to == rdmaio.StateRTS && cur == rdmaio.StateRTR:
		s.mask |= ibvQPSQPSN
		if t == rdmaio.RC {
			s.mask |= ibvQPTimeout | ibvQPRetryCnt | ibvQPRNRRetry | ibvQPMaxQPRdAtomic
			s.timeout = timeoutCode(attr.Timeout)
			s.retryCnt = uint8(attr.RetryCount)
			s.rnrRetry = uint8(attr.RNRRetry)
			s.maxRdAtomic = uint8(max(1, min(initRdAtom, maxRdAtomic)))
		}
	}
	return s, nil
}

// gidEntry is one entry of a port's GID table.
type gidEntry struct {
	index int
	gid   [16]byte
	typ   uint32 // gidType*
}

// selectGID picks the GID table entry a port publishes: on InfiniBand
// entry 0; on Ethernet a RoCE v2 entry with an IPv4-mapped address, else
// RoCE v2 with a global IPv6 address, else any RoCE v2 entry, else RoCE v1,
// skipping empty entries. want ≥ 0 picks that index (it must exist and be
// non-empty).
func selectGID(link uint8, table []gidEntry, want int) (gidEntry, error) {
	if want >= 0 {
		for _, e := range table {
			if e.index == want && e.gid != [16]byte{} {
				return e, nil
			}
		}
		return gidEntry{}, fmt.Errorf("%w: gid_index %d: no such non-empty GID table entry", rdmaio.ErrInvalidArgument, want)
	}
	if link != linkEthernet {
		for _, e := range table {
			if e.index == 0 {
				return e, nil
			}
		}
		return gidEntry{}, fmt.Errorf("%w: the port has no GID 0", ErrNoDevice)
	}
	best, bestRank := gidEntry{}, 0
	for _, e := range table {
		if e.gid == [16]byte{} {
			continue
		}
		ip := netip.AddrFrom16(e.gid)
		r := 0
		switch {
		case e.typ == gidTypeRoCEv2 && ip.Is4In6():
			r = 4
		case e.typ == gidTypeRoCEv2 && ip.IsGlobalUnicast():
			r = 3
		case e.typ == gidTypeRoCEv2:
			r = 2
		case e.typ == gidTypeRoCEv1:
			r = 1
		}
		if r > bestRank {
			best, bestRank = e, r
		}
	}
	if bestRank == 0 {
		return gidEntry{}, fmt.Errorf("%w: no usable RoCE GID on the port (is an IP address configured on its interface?)", ErrNoDevice)
	}
	return best, nil
}

// grhSourceGID returns the source GID of a received UD datagram from its
// 40-byte GRH. For RoCE v2 over IPv4 the buffer holds an IPv4 header in its
// last 20 bytes instead; the source address is returned IPv4-mapped, as the
// GID table holds it.
func grhSourceGID(grh []byte) [16]byte {
	var g [16]byte
	if len(grh) < grhLen {
		return g
	}
	if grh[20]>>4 == 4 && [20]byte(grh[:20]) == [20]byte{} {
		g[10], g[11] = 0xff, 0xff
		copy(g[12:], grh[32:36])
		return g
	}
	copy(g[:], grh[8:24])
	return g
}

// parseOptions reads Config.Options.
func parseOptions(o map[string]string, localSize int) (options, error) {
	opt := options{port: 0, gidIndex: -1, maxInline: DefaultMaxInline, policy: defaultPolicy(localSize)}
	for k, v := range o {
		var err error
		switch k {
		case "device":
			opt.device = v
		case "port":
			opt.port, err = parseInt(v, 1, 255)
		case "gid_index":
			opt.gidIndex, err = parseInt(v, 0, 255)
		case "max_inline":
			opt.maxInline, err = parseInt(v, 0, 1<<16)
		case "spin", "yield", "sleep":
			var d time.Duration
			if d, err = time.ParseDuration(v); err == nil && d < 0 {
				err = fmt.Errorf("negative duration")
			}
			switch k {
			case "spin":
				opt.policy.Spin = d
			case "yield":
				opt.policy.Yield = d
			default:
				if d == 0 {
					err = fmt.Errorf("sleep must be positive")
				}
				opt.policy.Sleep = d
			}
		default:
			return opt, fmt.Errorf("%w: unknown option %q (known: device, port, gid_index, max_inline, spin, yield, sleep)", rdmaio.ErrInvalidArgument, k)
		}
		if err != nil {
			return opt, fmt.Errorf("%w: option %s=%q: %w", rdmaio.ErrInvalidArgument, k, v, err)
		}
	}
	return opt, nil
}

func parseInt(s string, lo, hi int) (int, error) {
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, err
	}
	if v < lo || v > hi {
		return 0, fmt.Errorf("out of range %d..%d", lo, hi)
	}
	return v, nil
}

// learn returns the rank to record for a port address: -1 once ranks
// that share the port (several ranks on one adapter) make it ambiguous.
func learn[K comparable](m map[K]int32, k K, rank int32) int32 {
	if r, ok := m[k]; ok && r != rank {
		return -1
	}
	return rank
}
