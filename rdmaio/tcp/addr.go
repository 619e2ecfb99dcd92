package tcp

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
)

// Address blob (Device.Addr):
//
//	"JTA1" | rank u32 | device id u64 | job hash u64 | mtu u32 |
//	TCP: ip length u8 (4 or 16) | ip | port u16 |
//	UDP: ip length u8 (4 or 16) | ip | port u16
//
// The device id is random per device, so that a stale address (a device that
// closed and whose ports were reused) is told apart; the job hash rejects an
// address of another job before any connection is attempted.
var addrMagic = [4]byte{'J', 'T', 'A', '1'}

const (
	addrFixed  = 4 + 4 + 8 + 8 + 4
	addrMinLen = addrFixed + 2*(1+4+2)
	addrMaxLen = addrFixed + 2*(1+16+2)
)

// peerAddr is a decoded address blob.
type peerAddr struct {
	rank    uint32
	devID   uint64
	jobHash uint64
	mtu     uint32
	tcp     netip.AddrPort
	udp     netip.AddrPort
}

func jobHash(job string) uint64 {
	s := sha256.Sum256([]byte("jia-tcp-job\x00" + job))
	return binary.LittleEndian.Uint64(s[:8])
}

func appendAddrPort(b []byte, ap netip.AddrPort) []byte {
	ip := ap.Addr().Unmap()
	raw := ip.AsSlice()
	b = append(b, byte(len(raw)))
	b = append(b, raw...)
	return binary.LittleEndian.AppendUint16(b, ap.Port())
}

func (a *peerAddr) encode() []byte {
	b := make([]byte, 0, addrMaxLen)
	b = append(b, addrMagic[:]...)
	b = binary.LittleEndian.AppendUint32(b, a.rank)
	b = binary.LittleEndian.AppendUint64(b, a.devID)
	b = binary.LittleEndian.AppendUint64(b, a.jobHash)
	b = binary.LittleEndian.AppendUint32(b, a.mtu)
	b = appendAddrPort(b, a.tcp)
	return appendAddrPort(b, a.udp)
}

func readAddrPort(b []byte) (netip.AddrPort, []byte, error) {
	if len(b) < 1 {
		return netip.AddrPort{}, nil, errProto
	}
	n := int(b[0])
	if n != 4 && n != 16 || len(b) < 1+n+2 {
		return netip.AddrPort{}, nil, errProto
	}
	ip, ok := netip.AddrFromSlice(b[1 : 1+n])
	if !ok {
		return netip.AddrPort{}, nil, errProto
	}
	if n == 16 && ip.Is4In6() {
		return netip.AddrPort{}, nil, errProto // not minimal
	}
	port := binary.LittleEndian.Uint16(b[1+n:])
	if port == 0 || !ip.IsValid() || ip.IsUnspecified() || ip.IsMulticast() {
		return netip.AddrPort{}, nil, errProto
	}
	return netip.AddrPortFrom(ip, port), b[1+n+2:], nil
}

// decodeAddr parses an address blob. Any deviation from the format is
// rdmaio.ErrBadAddress.
func decodeAddr(b []byte) (peerAddr, error) {
	var a peerAddr
	if len(b) < addrMinLen || len(b) > addrMaxLen || [4]byte(b[:4]) != addrMagic {
		return a, fmt.Errorf("%w: not a tcp provider address (%d bytes)", rdmaio.ErrBadAddress, len(b))
	}
	a.rank = binary.LittleEndian.Uint32(b[4:])
	a.devID = binary.LittleEndian.Uint64(b[8:])
	a.jobHash = binary.LittleEndian.Uint64(b[16:])
	a.mtu = binary.LittleEndian.Uint32(b[24:])
	rest := b[addrFixed:]
	var err error
	if a.tcp, rest, err = readAddrPort(rest); err == nil {
		a.udp, rest, err = readAddrPort(rest)
	}
	if err != nil || len(rest) != 0 || a.rank > 1<<31-1 || a.devID == 0 || a.mtu < minMTU || a.mtu > maxMTU {
		return a, fmt.Errorf("%w: malformed tcp provider address", rdmaio.ErrBadAddress)
	}
	return a, nil
}

// rawSockaddr is a socket address in the kernel's layout, for sendmsg
// without allocation.
type rawSockaddr struct {
	v4  unix.RawSockaddrInet4
	v6  unix.RawSockaddrInet6
	is6 bool
}

func (r *rawSockaddr) set(ap netip.AddrPort) {
	ip := ap.Addr().Unmap()
	port := ap.Port()
	if ip.Is4() {
		r.is6 = false
		r.v4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: ip.As4()}
		p := (*[2]byte)(unsafe.Pointer(&r.v4.Port))
		p[0], p[1] = byte(port>>8), byte(port)
		return
	}
	r.is6 = true
	r.v6 = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: ip.As16()}
	p := (*[2]byte)(unsafe.Pointer(&r.v6.Port))
	p[0], p[1] = byte(port>>8), byte(port)
}

// ptr returns the address and length for a system call.
func (r *rawSockaddr) ptr() (*byte, uint32) {
	if r.is6 {
		return (*byte)(unsafe.Pointer(&r.v6)), unix.SizeofSockaddrInet6
	}
	return (*byte)(unsafe.Pointer(&r.v4)), unix.SizeofSockaddrInet4
}

// sockaddr returns ap as a unix.Sockaddr for set-up calls (bind, connect).
func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	ip := ap.Addr().Unmap()
	if ip.Is4() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ip.As4()}
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ip.As16()}
}

// addrPortOf converts a socket address returned by the kernel.
func addrPortOf(sa unix.Sockaddr) (netip.AddrPort, error) {
	switch s := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(s.Addr), uint16(s.Port)), nil
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(s.Addr).Unmap(), uint16(s.Port)), nil
	}
	return netip.AddrPort{}, fmt.Errorf("unexpected socket address %T", sa)
}
