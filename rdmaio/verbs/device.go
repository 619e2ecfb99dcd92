//go:build verbs

package verbs

/*
#cgo LDFLAGS: -libverbs
#include "jia_verbs.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/provider"
)

func init() { rdmaio.Register(Name, Provider{}) }

// Provider opens verbs devices. It is registered as "verbs"; using it
// directly is equivalent to rdmaio.Open("verbs", cfg).
type Provider struct{}

// Open opens a device. See the package documentation for cfg.Options.
func (Provider) Open(cfg rdmaio.Config) (rdmaio.Device, error) {
	return provider.AsDevice(Open(cfg))
}

// Probe implements rdmaio.Prober: nil when libibverbs sees an RDMA device.
func (Provider) Probe() error {
	_, err := Probe()
	return err
}

// Device is an opened RDMA device port, one per rank.
type Device struct {
	ctx        *C.struct_ibv_context
	name       string
	opt        options
	local      portAddr
	blob       []byte
	attr       rdmaio.DeviceAttr
	maxCQE     int
	maxSRQWR   int
	maxSRQSGE  int
	maxMRSize  int
	rdAtom     int
	initRdAtom int
	wqs        *provider.KeyTable[workQueue]

	mu     sync.Mutex // object creation and destruction
	closed bool
	pds    map[*pd]struct{}
	cqs    map[*cq]struct{}

	peerMu sync.RWMutex
	byNum  map[uint32]*qp
	byGID  map[[16]byte]int32
	byLID  map[uint16]int32
}

// errnoOf returns the errno of a failed C call (EIO when it set none).
func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) && e != 0 {
		return e
	}
	return syscall.EIO
}

// rcErrno converts a verbs return code (an errno value, or -1 with errno
// set) to an error.
func rcErrno(rc C.int, err error) syscall.Errno {
	if rc > 0 {
		return syscall.Errno(rc)
	}
	return errnoOf(err)
}

// Open opens the first RDMA device with an active port (or the device and
// port named by cfg.Options). Without one it returns an error wrapping
// ErrNoDevice.
func Open(cfg rdmaio.Config) (*Device, error) {
	opt, err := parseOptions(cfg.Options, cfg.LocalSize)
	if err != nil {
		return nil, fmt.Errorf("verbs: open: %w", err)
	}
	if cfg.Rank < 0 || int64(cfg.Rank) > 1<<31-1 {
		return nil, fmt.Errorf("verbs: open: %w: rank %d", rdmaio.ErrInvalidArgument, cfg.Rank)
	}
	var num C.int
	list, lerr := C.ibv_get_device_list(&num)
	if list == nil {
		e := errnoOf(lerr)
		if e == syscall.EIO && lerr == nil {
			e = 0
		}
		return nil, fmt.Errorf("verbs: open: %w", noDeviceError(e))
	}
	defer C.ibv_free_device_list(list)
	if num <= 0 {
		return nil, fmt.Errorf("verbs: open: %w", noDeviceError(0))
	}
	var reasons, names []string
	for _, dv := range unsafe.Slice(list, int(num)) {
		name := C.GoString(C.ibv_get_device_name(dv))
		names = append(names, name)
		if opt.device != "" && name != opt.device {
			continue
		}
		d, err := openDevice(dv, name, opt, cfg)
		if err == nil {
			return d, nil
		}
		if !errors.Is(err, rdmaio.ErrNoDevice) {
			return nil, fmt.Errorf("verbs: open %s: %w", name, err)
		}
		reasons = append(reasons, name+": "+err.Error())
	}
	if len(reasons) == 0 {
		return nil, fmt.Errorf("verbs: open: %w: device %q not found (devices: %s)", ErrNoDevice, opt.device, strings.Join(names, ", "))
	}
	return nil, fmt.Errorf("verbs: open: %w: no usable port (%s)", ErrNoDevice, strings.Join(reasons, "; "))
}

// openDevice opens one device and selects its port and GID.
func openDevice(dv *C.struct_ibv_device, name string, opt options, cfg rdmaio.Config) (*Device, error) {
	ctx, err := C.ibv_open_device(dv)
	if ctx == nil {
		return nil, fmt.Errorf("%w: ibv_open_device: %w", ErrNoDevice, errnoOf(err))
	}
	d := &Device{ctx: ctx, name: name, opt: opt}
	if err := d.setup(cfg); err != nil {
		C.ibv_close_device(ctx)
		return nil, err
	}
	return d, nil
}

func (d *Device) setup(cfg rdmaio.Config) error {
	var da C.struct_ibv_device_attr
	if rc, err := C.ibv_query_device(d.ctx, &da); rc != 0 {
		return fmt.Errorf("ibv_query_device: %w", rcErrno(rc, err))
	}
	var pa C.struct_ibv_port_attr
	port := 0
	for p := 1; p <= int(da.phys_port_cnt); p++ {
		if d.opt.port != 0 && p != d.opt.port {
			continue
		}
		if rc, err := C.jia_query_port(d.ctx, C.uint8_t(p), &pa); rc != 0 {
			return fmt.Errorf("ibv_query_port %d: %w", p, rcErrno(rc, err))
		}
		if pa.state == ibvPortActive {
			port = p
			break
		}
	}
	if port == 0 {
		if d.opt.port != 0 {
			return fmt.Errorf("%w: port %d is missing or not active", ErrNoDevice, d.opt.port)
		}
		return fmt.Errorf("%w: no active port (of %d)", ErrNoDevice, int(da.phys_port_cnt))
	}
	link := uint8(pa.link_layer)
	if link == linkUnspecified {
		link = linkInfiniBand
	}
	var table []gidEntry
	for i := 0; i < int(pa.gid_tbl_len); i++ {
		var e gidEntry
		var typ C.uint32_t
		if C.jia_query_gid(d.ctx, C.uint8_t(port), C.int(i), (*C.uint8_t)(unsafe.Pointer(&e.gid[0])), &typ) != 0 {
			continue
		}
		e.index, e.typ = i, uint32(typ)
		table = append(table, e)
	}
	gid, err := selectGID(link, table, d.opt.gidIndex)
	if err != nil {
		return err
	}
	d.local = portAddr{
		rank: uint32(cfg.Rank), jobHash: jobHash(cfg.Job), port: uint8(port), link: link,
		lid: uint16(pa.lid), mtu: uint8(pa.active_mtu), gidIndex: uint8(gid.index), gid: gid.gid,
	}
	if link == linkInfiniBand && !unicastLID(d.local.lid) {
		return fmt.Errorf("%w: port %d has no LID (is a subnet manager running?)", ErrNoDevice, port)
	}
	if mtuBytes(d.local.mtu) == 0 {
		return fmt.Errorf("%w: port %d reports MTU enum %d", ErrNoDevice, port, d.local.mtu)
	}
	d.blob = d.local.encode()
	d.attr = rdmaio.DeviceAttr{
		Provider:   Name,
		MaxQP:      int(da.max_qp),
		MaxCQ:      int(da.max_cq),
		MaxSRQ:     int(da.max_srq),
		MaxMR:      int(da.max_mr),
		MaxQPWR:    int(da.max_qp_wr),
		MaxSGE:     int(da.max_sge),
		MaxInline:  d.opt.maxInline,
		MaxMsgSize: int(min(uint64(pa.max_msg_sz), 1<<31)),
		MTU:        mtuBytes(d.local.mtu),
	}
	d.maxCQE = int(da.max_cqe)
	d.maxSRQWR, d.maxSRQSGE = int(da.max_srq_wr), int(da.max_srq_sge)
	d.maxMRSize = int(min(uint64(da.max_mr_size), 1<<46))
	d.rdAtom, d.initRdAtom = int(da.max_qp_rd_atom), int(da.max_qp_init_rd_atom)
	slots := min(2*max(d.attr.MaxQP, 1)+max(d.attr.MaxSRQ, 0), maxKeySlots)
	if d.wqs, err = provider.NewKeyTable[workQueue](slots); err != nil {
		return err
	}
	d.pds = map[*pd]struct{}{}
	d.cqs = map[*cq]struct{}{}
	d.byNum = map[uint32]*qp{}
	d.byGID = map[[16]byte]int32{}
	d.byLID = map[uint16]int32{}
	return nil
}

// Provider returns "verbs".
func (d *Device) Provider() string { return Name }

// Attr returns the device's limits.
func (d *Device) Attr() rdmaio.DeviceAttr { return d.attr }

// Addr returns the device's address blob.
func (d *Device) Addr() []byte { return append([]byte(nil), d.blob...) }

// Name returns the libibverbs device name, e.g. "mlx5_0".
func (d *Device) Name() string { return d.name }

func (d *Device) errf(format string, a ...any) error {
	return fmt.Errorf("verbs: "+d.name+": "+format, a...)
}

// begin takes d.mu for creating or destroying an object.
func (d *Device) begin() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return rdmaio.ErrClosed
	}
	return nil
}

// peer decodes a peer address and remembers its rank for SrcRank.
func (d *Device) peer(b []byte) (portAddr, error) {
	a, err := decodeAddr(b)
	if err != nil {
		return a, err
	}
	if err := checkPeer(&d.local, &a); err != nil {
		return a, err
	}
	d.peerMu.Lock()
	if a.link == linkEthernet {
		d.byGID[a.gid] = learn(d.byGID, a.gid, int32(a.rank))
	} else {
		d.byLID[a.lid] = learn(d.byLID, a.lid, int32(a.rank))
	}
	d.peerMu.Unlock()
	return a, nil
}

// srcRank returns the rank of a UD sender from its GRH or LID, -1 when
// unknown or when several known ranks share the sender's port.
func (d *Device) srcRank(grh []byte, hasGRH bool, slid uint16) int32 {
	d.peerMu.RLock()
	defer d.peerMu.RUnlock()
	if d.local.link == linkEthernet {
		if hasGRH {
			if r, ok := d.byGID[grhSourceGID(grh)]; ok {
				return r
			}
		}
		return -1
	}
	if r, ok := d.byLID[slid]; ok {
		return r
	}
	return -1
}

func (d *Device) qpOf(num uint32) *qp {
	d.peerMu.RLock()
	defer d.peerMu.RUnlock()
	return d.byNum[num]
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (rdmaio.PD, error) {
	if err := d.begin(); err != nil {
		return nil, d.errf("alloc pd: %w", err)
	}
	defer d.mu.Unlock()
	p, err := C.ibv_alloc_pd(d.ctx)
	if p == nil {
		return nil, d.errf("alloc pd: %w", errnoOf(err))
	}
	x := &pd{dev: d, p: p, mrs: map[*mr]struct{}{}, qps: map[*qp]struct{}{}, srqs: map[*srq]struct{}{},
		ahs: map[*ah]struct{}{}, allocs: map[uintptr]*alloc{}}
	d.pds[x] = struct{}{}
	return x, nil
}

// Close destroys everything created from the device and closes it.
func (d *Device) Close() error {
	if err := d.begin(); err != nil {
		return d.errf("close: %w", err)
	}
	defer d.mu.Unlock()
	d.closed = true
	var errs []error
	for p := range d.pds {
		errs = append(errs, p.destroyAll())
	}
	for c := range d.cqs {
		errs = append(errs, c.destroy())
	}
	if rc, err := C.ibv_close_device(d.ctx); rc != 0 {
		errs = append(errs, fmt.Errorf("ibv_close_device: %w", rcErrno(rc, err)))
	}
	if err := errors.Join(errs...); err != nil {
		return d.errf("close: %w", err)
	}
	return nil
}

// Probe describes the RDMA devices libibverbs sees and their ports, for
// `jiarun info`. Without any it returns an error wrapping ErrNoDevice.
func Probe() (string, error) {
	var num C.int
	list, lerr := C.ibv_get_device_list(&num)
	if list == nil {
		e := errnoOf(lerr)
		if lerr == nil {
			e = 0
		}
		return "", noDeviceError(e)
	}
	defer C.ibv_free_device_list(list)
	if num <= 0 {
		return "", noDeviceError(0)
	}
	var out []string
	for _, dv := range unsafe.Slice(list, int(num)) {
		name := C.GoString(C.ibv_get_device_name(dv))
		ctx, err := C.ibv_open_device(dv)
		if ctx == nil {
			out = append(out, fmt.Sprintf("%s (cannot open: %v)", name, errnoOf(err)))
			continue
		}
		var da C.struct_ibv_device_attr
		var ports []string
		if C.ibv_query_device(ctx, &da) == 0 {
			for p := 1; p <= int(da.phys_port_cnt); p++ {
				var pa C.struct_ibv_port_attr
				if C.jia_query_port(ctx, C.uint8_t(p), &pa) != 0 {
					continue
				}
				st := "down"
				if pa.state == ibvPortActive {
					st = "active"
				}
				link := uint8(pa.link_layer)
				if link == linkUnspecified {
					link = linkInfiniBand
				}
				ports = append(ports, fmt.Sprintf("port %d %s %s MTU %d", p, st, linkName(link), mtuBytes(uint8(pa.active_mtu))))
			}
		}
		C.ibv_close_device(ctx)
		out = append(out, name+" ("+strings.Join(ports, ", ")+")")
	}
	return strings.Join(out, "; "), nil
}
