package verbs

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jiarun/jia/rdmaio"
)

// Name is the name the provider registers with rdmaio (in builds with the
// verbs tag).
const Name = "verbs"

// ErrNoDevice is returned (wrapped) by Open when libibverbs finds no RDMA
// device or no active port. Its message is "no RDMA device"; it wraps
// rdmaio.ErrNoDevice.
var ErrNoDevice error = noDevice{}

type noDevice struct{}

func (noDevice) Error() string { return "no RDMA device" }
func (noDevice) Unwrap() error { return rdmaio.ErrNoDevice }

// Link layers of a port (IBV_LINK_LAYER_*).
const (
	linkUnspecified uint8 = 0
	linkInfiniBand  uint8 = 1
	linkEthernet    uint8 = 2
)

// Address blob (Device.Addr), 40 bytes:
//
//	"JVA1" | rank u32 | job hash u64 | port u8 | link layer u8 | lid u16 |
//	mtu u8 (IBV_MTU_*) | gid index u8 | reserved u16 (zero) | gid [16]
//
// Integers are little-endian.
var addrMagic = [4]byte{'J', 'V', 'A', '1'}

const addrLen = 4 + 4 + 8 + 1 + 1 + 2 + 1 + 1 + 2 + 16

// portAddr is a decoded device address: what a peer needs to reach a port.
type portAddr struct {
	rank     uint32
	jobHash  uint64
	port     uint8
	link     uint8
	lid      uint16
	mtu      uint8 // IBV_MTU_* enum
	gidIndex uint8
	gid      [16]byte
}

func jobHash(job string) uint64 {
	s := sha256.Sum256([]byte("jia-verbs-job\x00" + job))
	return binary.LittleEndian.Uint64(s[:8])
}

func (a portAddr) encode() []byte {
	b := make([]byte, 0, addrLen)
	b = append(b, addrMagic[:]...)
	b = binary.LittleEndian.AppendUint32(b, a.rank)
	b = binary.LittleEndian.AppendUint64(b, a.jobHash)
	b = append(b, a.port, a.link)
	b = binary.LittleEndian.AppendUint16(b, a.lid)
	b = append(b, a.mtu, a.gidIndex, 0, 0)
	return append(b, a.gid[:]...)
}

var errMalformed = errors.New("malformed verbs provider address")

// decodeAddr parses an address blob. Any deviation from the format is
// rdmaio.ErrBadAddress. It checks the fields a peer needs: a valid port, a
// known link layer, a unicast LID on InfiniBand, a non-zero GID on
// Ethernet, a known MTU.
func decodeAddr(b []byte) (portAddr, error) {
	var a portAddr
	if len(b) != addrLen || [4]byte(b[:4]) != addrMagic {
		return a, fmt.Errorf("%w: not a verbs provider address (%d bytes)", rdmaio.ErrBadAddress, len(b))
	}
	a.rank = binary.LittleEndian.Uint32(b[4:])
	a.jobHash = binary.LittleEndian.Uint64(b[8:])
	a.port, a.link = b[16], b[17]
	a.lid = binary.LittleEndian.Uint16(b[18:])
	a.mtu, a.gidIndex = b[20], b[21]
	copy(a.gid[:], b[24:])
	bad := a.rank > 1<<31-1 || a.port == 0 || b[22] != 0 || b[23] != 0 || mtuBytes(a.mtu) == 0
	switch a.link {
	case linkInfiniBand:
		bad = bad || !unicastLID(a.lid)
	case linkEthernet:
		bad = bad || a.gid == [16]byte{}
	default:
		bad = true
	}
	if bad {
		return a, fmt.Errorf("%w: %w", rdmaio.ErrBadAddress, errMalformed)
	}
	return a, nil
}

// unicastLID reports whether lid is a valid unicast LID (1..0xBFFF).
func unicastLID(lid uint16) bool { return lid >= 1 && lid <= 0xBFFF }

// checkPeer checks that a peer's address belongs to this job and can be
// reached from local's link layer.
func checkPeer(local, peer *portAddr) error {
	if peer.jobHash != local.jobHash {
		return fmt.Errorf("%w: address of rank %d belongs to another job", rdmaio.ErrBadAddress, peer.rank)
	}
	if peer.link != local.link {
		return fmt.Errorf("%w: rank %d is on %s, this device on %s", rdmaio.ErrBadAddress, peer.rank, linkName(peer.link), linkName(local.link))
	}
	return nil
}

func linkName(l uint8) string {
	switch l {
	case linkInfiniBand:
		return "InfiniBand"
	case linkEthernet:
		return "Ethernet (RoCE)"
	}
	return fmt.Sprintf("link layer %d", l)
}

// ahSpec is the address vector (struct ibv_ah_attr) that reaches a peer.
type ahSpec struct {
	dlid      uint16
	global    bool
	dgid      [16]byte
	sgidIndex uint8
	hopLimit  uint8
	port      uint8
}

// ahFor returns the address vector from local to peer: by LID on
// InfiniBand, by GID with a GRH on Ethernet.
func ahFor(local, peer *portAddr) (ahSpec, error) {
	if err := checkPeer(local, peer); err != nil {
		return ahSpec{}, err
	}
	s := ahSpec{port: local.port}
	if local.link == linkEthernet {
		s.global = true
		s.dgid = peer.gid
		s.sgidIndex = local.gidIndex
		s.hopLimit = 64
	} else {
		s.dlid = peer.lid
	}
	return s, nil
}
