package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/internal/cpubind"
	"github.com/jiarun/jia/shmem/uffd"
)

// The floors of the machine: what the DSM's basic costs are made of,
// measured without the DSM. A fault served by the pager costs at least a
// userfaultfd round trip to another process; a call to the pager, at least
// a wake-up round trip.

// floorEnv starts this program as the other process of a floor.
const floorEnv = "DSMBENCH_FLOOR"

// Floors are the machine's costs, in microseconds.
type Floors struct {
	Syscall float64 // one system call (getppid)
	WakeRTT float64 // futex ping-pong between two processes, both sleeping
	// PageFault is a fault the kernel serves alone: the first write to a
	// page of a memfd whose page was dropped. Under a hypervisor that
	// traps page-table changes it is most of any fault's cost.
	PageFault float64
	// FaultRTT is a userfaultfd fault served by another process
	// (UFFDIO_COPY), wherever the scheduler puts the two.
	FaultRTT float64
	// The same with the two processes bound to one processor and to two.
	FaultSameCPU, FaultOtherCPU float64
	// The same with the server polling for pollWindow after each fault,
	// giving the processor away between polls: unbound, bound to one
	// processor, bound to two.
	FaultPoll, FaultPollSameCPU, FaultPollOtherCPU float64
	FaultNote                                      string // why the userfaultfd floors are missing
}

func measureFloors() Floors {
	var f Floors
	const n = 20000
	t := time.Now()
	for range n {
		unix.Getppid()
	}
	f.Syscall = us(time.Since(t)) / n
	f.WakeRTT = wakeRTT()
	f.PageFault = pageFault()
	f.FaultRTT, f.FaultNote = faultRTT("fault", anyCPU)
	f.FaultSameCPU, _ = faultRTT("fault", sameCPU)
	f.FaultOtherCPU, _ = faultRTT("fault", otherCPU)
	f.FaultPoll, _ = faultRTT("fault-poll", anyCPU)
	f.FaultPollSameCPU, _ = faultRTT("fault-poll", sameCPU)
	f.FaultPollOtherCPU, _ = faultRTT("fault-poll", otherCPU)
	return f
}

// floorChild is the other process of a floor; it never returns.
func floorChild(kind string) {
	switch kind {
	case "wake":
		mem, err := unix.Mmap(3, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			os.Exit(1)
		}
		w := (*[2]uint32)(unsafe.Pointer(&mem[0]))
		var last uint32
		for {
			for {
				v := atomic.LoadUint32(&w[0])
				if v == ^uint32(0) {
					os.Exit(0)
				}
				if v != last {
					last = v
					break
				}
				futex(&w[0], 0, v)
			}
			atomic.StoreUint32(&w[1], last)
			futex(&w[1], 1, 1)
		}
	case "fault", "fault-poll":
		// fault-poll polls the descriptor for a while after each fault,
		// giving the processor away between polls, before it sleeps.
		unix.SetNonblock(3, true) // exec made it blocking
		u := uffd.FromFD(3, 0)
		src := make([]byte, os.Getpagesize())
		var fs [16]uffd.Fault
		var last time.Time
		for {
			k, err := u.Read(fs[:])
			if err != nil {
				os.Exit(0)
			}
			for _, f := range fs[:k] {
				u.Copy(f.Address&^uintptr(len(src)-1), src, false, false)
			}
			switch {
			case k > 0:
				last = time.Now()
			case kind == "fault-poll" && time.Since(last) < pollWindow:
				unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			default:
				if _, err := u.Wait(-1); err != nil {
					os.Exit(0)
				}
			}
		}
	}
	os.Exit(2)
}

func stop(cmd *exec.Cmd) {
	cmd.Process.Kill()
	cmd.Wait()
}

func futex(addr *uint32, op int, val uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), uintptr(op), uintptr(val), 0, 0, 0)
}

// child starts this program as the other process of a floor, with fd as
// its descriptor 3.
func child(kind string, fd uintptr) (*exec.Cmd, error) {
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), floorEnv+"="+kind)
	cmd.ExtraFiles = []*os.File{os.NewFile(fd, "floor")}
	return cmd, cmd.Start()
}

// wakeRTT measures a futex ping-pong with a child process through a memfd.
func wakeRTT() float64 {
	fd, err := unix.MemfdCreate("dsmbench-floor", unix.MFD_CLOEXEC)
	if err != nil {
		return 0
	}
	defer unix.Close(fd)
	unix.Ftruncate(fd, 4096)
	mem, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return 0
	}
	defer unix.Munmap(mem)
	w := (*[2]uint32)(unsafe.Pointer(&mem[0]))
	cmd, err := child("wake", uintptr(fd))
	if err != nil {
		return 0
	}
	const n = 3000
	var t time.Time
	for i := 1; i <= n+100; i++ {
		if i == 101 {
			t = time.Now()
		}
		atomic.StoreUint32(&w[0], uint32(i))
		futex(&w[0], 1, 1)
		for {
			v := atomic.LoadUint32(&w[1])
			if v == uint32(i) {
				break
			}
			futex(&w[1], 0, v)
		}
	}
	d := time.Since(t)
	atomic.StoreUint32(&w[0], ^uint32(0))
	futex(&w[0], 1, 1)
	cmd.Wait()
	return us(d) / n
}

// pollWindow is how long the fault-poll child polls after a fault.
const pollWindow = 200 * time.Microsecond

// faultPlace is where faultRTT runs the faulting thread and the child
// that serves its faults.
type faultPlace int

const (
	anyCPU   faultPlace = iota // wherever the scheduler puts them
	sameCPU                    // both bound to the faulting thread's processor
	otherCPU                   // bound to two different processors
)

// faultRTT measures read faults on a memfd registered with a userfaultfd
// that a child process serves with UFFDIO_COPY, pages touched once. kind
// is the child's: "fault" sleeps in poll(2) between faults, "fault-poll"
// polls for pollWindow first.
func faultRTT(kind string, place faultPlace) (float64, string) {
	u, err := uffd.Open(uffd.FeatureMissingShmem)
	if err != nil {
		return 0, err.Error()
	}
	defer u.Close()
	const n = 2000
	ps := os.Getpagesize()
	fd, err := unix.MemfdCreate("dsmbench-floor", unix.MFD_CLOEXEC)
	if err != nil {
		return 0, err.Error()
	}
	defer unix.Close(fd)
	unix.Ftruncate(fd, int64(n*ps))
	mem, err := unix.Mmap(fd, 0, n*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return 0, err.Error()
	}
	defer unix.Munmap(mem)
	if _, err := u.Register(uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uffd.ModeMissing); err != nil {
		return 0, err.Error()
	}
	// The child inherits the affinity of the thread that starts it.
	if place != anyCPU {
		if runtime.NumCPU() < 2 {
			return 0, "one processor"
		}
		cpu := 1
		if place == sameCPU {
			cpu = 0
		}
		unpin, err := cpubind.Pin(cpu)
		if err != nil {
			return 0, err.Error()
		}
		cmd, err := child(kind, uintptr(u.Fd()))
		unpin()
		if err != nil {
			return 0, err.Error()
		}
		defer stop(cmd)
		unpin, err = cpubind.Pin(0)
		if err != nil {
			return 0, err.Error()
		}
		defer unpin()
	} else {
		cmd, err := child(kind, uintptr(u.Fd()))
		if err != nil {
			return 0, err.Error()
		}
		defer stop(cmd)
	}
	// A first round maps every page once: the pages the memfd gets back
	// have been used, as a DSM's pages are after its first iterations
	// (the first touch of memory a virtual machine never used costs more).
	var sink byte
	var d time.Duration
	for round := range 2 {
		if round == 1 {
			if err := uffd.PunchHole(fd, 0, int64(n*ps)); err != nil {
				return 0, err.Error()
			}
		}
		t := time.Now()
		for p := n - 1; p >= 0; p-- {
			sink += mem[p*ps]
		}
		d = time.Since(t)
	}
	if sink != 0 {
		return 0, fmt.Sprintf("served pages read %d", sink)
	}
	return us(d) / n, ""
}

// pageFault measures write faults on the pages of a memfd after their
// pages were dropped, served by the kernel alone.
func pageFault() float64 {
	const n = 2000
	ps := os.Getpagesize()
	fd, err := unix.MemfdCreate("dsmbench-floor", unix.MFD_CLOEXEC)
	if err != nil {
		return 0
	}
	defer unix.Close(fd)
	if unix.Ftruncate(fd, int64(n*ps)) != nil {
		return 0
	}
	mem, err := unix.Mmap(fd, 0, n*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return 0
	}
	defer unix.Munmap(mem)
	var d time.Duration
	for range 2 { // the first round maps pages the machine never used
		if uffd.PunchHole(fd, 0, int64(n*ps)) != nil {
			return 0
		}
		t := time.Now()
		for p := n - 1; p >= 0; p-- {
			mem[p*ps] = 1
		}
		d = time.Since(t)
	}
	return us(d) / n
}
