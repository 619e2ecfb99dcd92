package launcher

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	goruntime "runtime"
	"runtime/debug"
	"strings"
	"text/tabwriter"

	"golang.org/x/sys/unix"
)

// version is set at link time (-ldflags "-X github.com/jiarun/jia/launcher.version=…").
var version = ""

// Version returns jiarun's version: the linked-in version, else the module
// version from the build information, else "devel".
func Version() string {
	v := version
	if v == "" {
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		} else {
			v = "devel"
		}
	}
	return fmt.Sprintf("%s (%s %s/%s)", v, goruntime.Version(), goruntime.GOOS, goruntime.GOARCH)
}

// HostInfo is what a host offers to jiarun's ranks.
type HostInfo struct {
	Hostname   string
	Cores      int // cores this process may run on
	GoVersion  string
	GoTool     string // `go version` of the go command in PATH, if any
	SHM        Availability
	TCP        Availability
	Verbs      Availability
	UFFD       Availability
	CrossMem   Availability // process_vm_readv/writev between ranks
	MemlockMax string
}

// Availability says whether a facility works here and how, or why not.
type Availability struct {
	OK     bool
	Detail string
}

func (a Availability) String() string {
	if a.OK {
		return "yes: " + a.Detail
	}
	return "no: " + a.Detail
}

// ProbeHost examines this host.
func ProbeHost() HostInfo {
	var h HostInfo
	h.Hostname, _ = os.Hostname()
	h.Cores = procsPerRank(1)
	h.GoVersion = goruntime.Version()
	if out, err := exec.Command("go", "version").Output(); err == nil {
		h.GoTool = strings.TrimSpace(string(out))
	} else {
		h.GoTool = "not found in PATH (needed only to build a PROGRAM given as a directory)"
	}
	h.SHM = probeSHM()
	h.TCP = Availability{OK: true, Detail: "rdmaio tcp provider: RC over authenticated TCP, UD over UDP, between hosts"}
	h.Verbs = probeVerbs()
	h.UFFD = probeUFFD()
	h.CrossMem = probeCrossMem()
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err == nil {
		h.MemlockMax = limitString(rl.Cur)
	}
	return h
}

func limitString(v uint64) string {
	if v == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return fmt.Sprintf("%d KiB", v/1024)
}

func probeSHM() Availability {
	f, err := os.CreateTemp("/dev/shm", "jiarun-probe-")
	if err != nil {
		return Availability{Detail: fmt.Sprintf("/dev/shm not writable: %v", err)}
	}
	f.Close()
	os.Remove(f.Name())
	return Availability{OK: true, Detail: "rdmaio shm provider, shared memory in /dev/shm for ranks on this host"}
}

func probeVerbs() Availability {
	if verbsProbe != nil {
		return verbsProbe()
	}
	ents, err := os.ReadDir("/sys/class/infiniband")
	if err != nil || len(ents) == 0 {
		return Availability{Detail: "no RDMA device"}
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	if !verbsBuilt {
		return Availability{Detail: fmt.Sprintf("RDMA devices %s present, but this jiarun was built without the verbs build tag", strings.Join(names, ", "))}
	}
	return Availability{OK: true, Detail: "RDMA devices " + strings.Join(names, ", ")}
}

// verbsBuilt is true in builds with the verbs provider (build tag verbs).
var verbsBuilt = false

// verbsProbe, set in builds with the verbs provider, asks libibverbs for
// the devices instead of sysfs.
var verbsProbe func() Availability

// probeUFFD opens a userfaultfd the way a rank's DSM would.
func probeUFFD() Availability {
	unpriv := "unknown"
	if b, err := os.ReadFile("/proc/sys/vm/unprivileged_userfaultfd"); err == nil {
		unpriv = strings.TrimSpace(string(b))
	}
	fd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|unix.O_NONBLOCK, 0, 0)
	if errno == 0 {
		unix.Close(int(fd))
		return Availability{OK: true, Detail: fmt.Sprintf("full mode (kernel faults too; vm.unprivileged_userfaultfd=%s)", unpriv)}
	}
	const userModeOnly = 1
	fd, _, errno2 := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|unix.O_NONBLOCK|userModeOnly, 0, 0)
	if errno2 == 0 {
		unix.Close(int(fd))
		return Availability{OK: true, Detail: "user mode only (UFFD_USER_MODE_ONLY): system calls cannot read or write DSM memory directly; " +
			"sysctl vm.unprivileged_userfaultfd=1 or CAP_SYS_PTRACE gives full mode"}
	}
	if errors.Is(errno, unix.ENOSYS) {
		return Availability{Detail: "the kernel has no userfaultfd (CONFIG_USERFAULTFD): the DSM cannot run here"}
	}
	return Availability{Detail: fmt.Sprintf("userfaultfd: %v; set sysctl vm.unprivileged_userfaultfd=1 (now %s) or run with CAP_SYS_PTRACE", errno, unpriv)}
}

func probeCrossMem() Availability {
	scope := "no Yama (no ptrace restriction)"
	if b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil {
		s := strings.TrimSpace(string(b))
		scope = "kernel.yama.ptrace_scope=" + s
		if s != "0" && os.Geteuid() != 0 {
			return Availability{Detail: scope + ": single-copy between ranks needs ptrace_scope 0 or CAP_SYS_PTRACE; shared-memory buffers are used instead"}
		}
	}
	return Availability{OK: true, Detail: "process_vm_readv/writev single copy (" + scope + ")"}
}

// Info writes `jiarun info`: what this host offers.
func Info(w io.Writer) error {
	h := ProbeHost()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "jiarun\t%s\n", Version())
	fmt.Fprintf(tw, "host\t%s\n", h.Hostname)
	fmt.Fprintf(tw, "cores\t%d usable (GOMAXPROCS per rank = cores / ranks on the host, at least 1)\n", h.Cores)
	fmt.Fprintf(tw, "go\t%s\n", h.GoTool)
	fmt.Fprintf(tw, "transport shm\t%s\n", h.SHM)
	fmt.Fprintf(tw, "transport tcp\t%s\n", h.TCP)
	fmt.Fprintf(tw, "transport verbs\t%s\n", h.Verbs)
	fmt.Fprintf(tw, "userfaultfd\t%s\n", h.UFFD)
	fmt.Fprintf(tw, "cross-memory\t%s\n", h.CrossMem)
	fmt.Fprintf(tw, "locked memory\t%s (RLIMIT_MEMLOCK; RDMA registration needs more than the default)\n", h.MemlockMax)
	return tw.Flush()
}
