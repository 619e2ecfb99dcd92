package qpbind

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jiarun/jia/rdmaio"
)

// fakeDev is a device GroupDevices can tell apart from others; it has no
// methods of its own.
type fakeDev struct{ rdmaio.Device }

// TestGroupDevices: one device for every peer, one per rank with a device
// shared by some, and a peer without a device.
func TestGroupDevices(t *testing.T) {
	a, b := &fakeDev{}, &fakeDev{}
	devs, slots, err := GroupDevices([]rdmaio.Device{a}, 1, 3, fmt.Errorf)
	if err != nil || !slices.Equal(devs, []rdmaio.Device{a}) || !slices.Equal(slots, []int{0, -1, 0}) {
		t.Fatalf("one device: %v %v %v", devs, slots, err)
	}
	devs, slots, err = GroupDevices([]rdmaio.Device{b, nil, a, b}, 1, 4, fmt.Errorf)
	if err != nil || !slices.Equal(devs, []rdmaio.Device{b, a}) || !slices.Equal(slots, []int{0, -1, 1, 0}) {
		t.Fatalf("a device per rank: %v %v %v", devs, slots, err)
	}
	if _, _, err := GroupDevices([]rdmaio.Device{a, nil, nil}, 1, 3, fmt.Errorf); err == nil || err.Error() != "new: no device for rank 2" {
		t.Fatalf("a peer without a device: %v", err)
	}
}

// closer fails its Close with err.
type closer struct{ err error }

func (c closer) Close() error { return c.err }

// TestTeardown: only failures are recorded, each naming the device and
// what failed; a nil object is skipped.
func TestTeardown(t *testing.T) {
	td := Teardown{Slot: 2, Provider: "shm"}
	td.Close("close cq", closer{})
	td.Close("close pd", nil)
	td.Free("ring", nil, nil, nil)
	gone := errors.New("gone")
	td.Close("close srq", closer{gone})
	if len(td.Errs) != 1 || !errors.Is(td.Errs[0], gone) || !strings.HasPrefix(td.Errs[0].Error(), "device 2 (shm): close srq: ") {
		t.Fatalf("errors %v", td.Errs)
	}
}
