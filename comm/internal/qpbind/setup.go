package qpbind

import (
	"encoding/binary"
	"fmt"

	"github.com/jiarun/jia/rdmaio"
)

// GroupDevices sorts the peers of rank among their devices. devices is a
// binding's Config.Devices: one device for every peer, or size entries
// where devices[p] reaches rank p (devices[rank] is ignored). It returns
// the distinct devices in the order of the first peer each reaches, and
// slots, where slots[p] is the index of peer p's device in them (-1 for
// rank itself). A peer without a device is an error made by errf.
func GroupDevices(devices []rdmaio.Device, rank, size int, errf func(format string, args ...any) error) (devs []rdmaio.Device, slots []int, err error) {
	slots = make([]int, size)
	slotOf := map[rdmaio.Device]int{}
	for p := range slots {
		if p == rank {
			slots[p] = -1
			continue
		}
		var dv rdmaio.Device
		if len(devices) == 1 {
			dv = devices[0]
		} else {
			dv = devices[p]
		}
		if dv == nil {
			return nil, nil, errf("new: no device for rank %d", p)
		}
		s, ok := slotOf[dv]
		if !ok {
			s = len(devs)
			slotOf[dv] = s
			devs = append(devs, dv)
		}
		slots[p] = s
	}
	return devs, slots, nil
}

// RecvQueue is where receive work requests are posted: an SRQ or a queue
// pair.
type RecvQueue interface {
	PostRecv(wrs []rdmaio.RecvWR) (int, error)
}

// RecvWRs returns the work requests of n receive buffers of size bytes that
// lie one after another in mr from its start, and their scatter lists:
// buffer i's work request has ID idFlag|i.
func RecvWRs(mr rdmaio.MR, n, size int, idFlag uint64) ([]rdmaio.SGE, []rdmaio.RecvWR) {
	sges := make([]rdmaio.SGE, n)
	wrs := make([]rdmaio.RecvWR, n)
	for i := range wrs {
		sges[i] = rdmaio.MRSGE(mr, i*size, size)
		wrs[i] = rdmaio.RecvWR{ID: idFlag | uint64(i), SGL: sges[i : i+1]}
	}
	return sges, wrs
}

// PostRecvs posts every work request of wrs to q, in as many calls as q
// takes.
func PostRecvs(q RecvQueue, wrs []rdmaio.RecvWR) error {
	for posted := 0; posted < len(wrs); {
		n, err := q.PostRecv(wrs[posted:])
		if err != nil {
			return fmt.Errorf("post receive buffers: %w", err)
		}
		posted += n
	}
	return nil
}

// Teardown collects the errors of releasing a device's objects, each
// naming the device (by its slot and provider) and what failed.
type Teardown struct {
	// Slot and Provider name the device.
	Slot     int
	Provider string
	// Errs are the failures so far.
	Errs []error
}

// Add records err, if not nil, as the failure of what.
func (td *Teardown) Add(what string, err error) {
	if err != nil {
		td.Errs = append(td.Errs, fmt.Errorf("device %d (%s): %s: %w", td.Slot, td.Provider, what, err))
	}
}

// Close closes c, if not nil, and records its failure as that of what.
func (td *Teardown) Close(what string, c interface{ Close() error }) {
	if c != nil {
		td.Add(what, c.Close())
	}
}

// Free deregisters mr and frees buf, memory of pd, those of them that are
// not nil, and records the failures as those of "deregister "+what and
// "free "+what.
func (td *Teardown) Free(what string, pd rdmaio.PD, mr rdmaio.MR, buf []byte) {
	if mr != nil {
		td.Add("deregister "+what, mr.Deregister())
	}
	if buf != nil {
		td.Add("free "+what, pd.Free(buf))
	}
}

// AppendDevice appends to a card how to reach dev: its provider's name (u8
// length and bytes) and its address (u16 length and bytes). Reader.Device
// reads them back.
func AppendDevice(b []byte, dev rdmaio.Device) []byte {
	name, addr := dev.Provider(), dev.Addr()
	b = append(b, byte(len(name)))
	b = append(b, name...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(addr)))
	return append(b, addr...)
}

// Device reads what AppendDevice wrote: a provider's name and a copy of a
// device address.
func (r *Reader) Device() (provider string, addr []byte) {
	provider = string(r.Bytes(int(r.U8())))
	addr = append([]byte(nil), r.Bytes(int(r.U16()))...)
	return provider, addr
}
