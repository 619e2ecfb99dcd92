// Command rdmaio measures every registered rdmaio provider side by side, in
// one run, with two real processes (the peer is this program started again)
// and, in the same run, the references the providers are judged against: a
// Go shared-memory spin ping-pong and a raw non-blocking TCP ping-pong over
// loopback that busy-polls read(2), each between two threads of one
// process.
//
//	rdmaio -runs 3 -target 200ms
//
// It prints one table: a row per metric (8-byte SEND half round trip, 8-byte
// RDMA WRITE and READ latency, RDMA WRITE and SEND bandwidth from 4 KiB to
// 4 MiB with 16 in flight, 8-byte message rate with 32 SENDs per doorbell
// and 256 in flight), a column per provider and reference, the target and
// whether it is met. Each figure is the best of -runs measurements (the
// smallest time, the largest rate), each measurement running for about
// -target; the load average of the machine is printed with the table.
package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/rdmaiotest"
	_ "github.com/jiarun/jia/rdmaio/shm"
	_ "github.com/jiarun/jia/rdmaio/tcp"
)

func main() {
	runs := flag.Int("runs", 3, "measurements per figure (the best is shown)")
	target := flag.Duration("target", 200*time.Millisecond, "duration of one measurement")
	only := flag.String("providers", "", "comma-separated providers to measure (default: every registered one)")
	peer := flag.String("peer", "", "serve as the peer process of `provider` (internal)")
	flag.Parse()
	if *peer != "" {
		if err := servePeer(*peer); err != nil {
			fmt.Fprintf(os.Stderr, "rdmaio peer: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if *runs < 1 || *target <= 0 {
		fatalf("-runs and -target must be positive")
	}
	names := rdmaio.Providers()
	if *only != "" {
		names = strings.Split(*only, ",")
	}
	load0 := loadAvg()
	start := time.Now()
	b := bench{runs: *runs, target: *target}
	srcs := make([]*source, 0, len(names)+2)
	for _, name := range names {
		srcs = append(srcs, b.provider(name))
	}
	srcs = append(srcs, b.spin(), b.rawTCP())
	// The runs go round the columns, so that every column sees the
	// machine in each of its moods (a virtual machine's speed changes
	// from one minute to the next) and the best of the runs compare.
	for r := range b.runs {
		fmt.Fprintf(os.Stderr, "run %d of %d...\n", r+1, b.runs)
		for _, src := range srcs {
			if src.round != nil && src.col.note == "" {
				src.col.note = src.roundNote()
			}
		}
	}
	cols := make([]column, 0, len(srcs))
	for _, src := range srcs {
		if src.close != nil {
			src.close()
		}
		cols = append(cols, src.col)
	}
	printTable(cols, *runs, *target, load0, loadAvg(), time.Since(start))
}

// source is a column being measured: round measures each of its figures
// once (keeping the best), close ends its session.
type source struct {
	col   column
	round func() error
	close func()
}

// roundNote runs one round and returns the column's note on failure.
func (s *source) roundNote() string {
	if err := s.round(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", s.col.name, err)
		return "failed"
	}
	return ""
}

// The rows of the table.
const (
	mHalfRTT = iota
	mWriteLat
	mReadLat
	mWriteBW4K
	mWriteBW64K
	mWriteBW1M
	mWriteBW4M
	mSendBW4K
	mSendBW64K
	mSendBW1M
	mSendBW4M
	mRate
	nMetrics
)

var metricNames = [nMetrics]string{
	"8 B SEND half round trip (µs)",
	"8 B RDMA WRITE latency (µs)",
	"8 B RDMA READ latency (µs)",
	"RDMA WRITE bandwidth 4 KiB (GB/s)",
	"RDMA WRITE bandwidth 64 KiB (GB/s)",
	"RDMA WRITE bandwidth 1 MiB (GB/s)",
	"RDMA WRITE bandwidth 4 MiB (GB/s)",
	"SEND bandwidth 4 KiB (GB/s)",
	"SEND bandwidth 64 KiB (GB/s)",
	"SEND bandwidth 1 MiB (GB/s)",
	"SEND bandwidth 4 MiB (GB/s)",
	"8 B message rate, 32 per doorbell (Mmsg/s)",
}

// higherBetter tells rates from times.
func higherBetter(m int) bool { return m >= mWriteBW4K }

// column is one provider's or reference's figures; NaN where not measured.
type column struct {
	name string
	note string // why there are no figures
	v    [nMetrics]float64
}

func newColumn(name string) column {
	c := column{name: name}
	for i := range c.v {
		c.v[i] = math.NaN()
	}
	return c
}

type bench struct {
	runs   int
	target time.Duration
}

// measure runs fn(n) with n grown until one call lasts about b.target and
// returns the time per operation of that call.
func (b *bench) measure(fn func(n int) error) (time.Duration, error) {
	if err := fn(8); err != nil { // warm up
		return 0, err
	}
	n := 16
	for {
		t0 := time.Now()
		if err := fn(n); err != nil {
			return 0, err
		}
		el := time.Since(t0)
		if el >= b.target || n >= 1<<30 {
			return el / time.Duration(n), nil
		}
		grow := 100.0
		if el > 0 {
			grow = min(100, 1.2*float64(b.target)/float64(el))
		}
		n = int(float64(n)*max(grow, 2)) + 1
	}
}

// best records v, a figure of metric m, keeping the best of the runs.
func best(c *column, m int, v float64) {
	cur := c.v[m]
	if math.IsNaN(cur) || higherBetter(m) && v > cur || !higherBetter(m) && v < cur {
		c.v[m] = v
	}
}

func usPerHop(op time.Duration) float64 { return op.Seconds() * 1e6 / 2 }
func usPerOp(op time.Duration) float64  { return op.Seconds() * 1e6 }
func gbps(size int) func(time.Duration) float64 {
	return func(op time.Duration) float64 { return float64(size) / op.Seconds() / 1e9 }
}
func mops(op time.Duration) float64 { return 1 / op.Seconds() / 1e6 }

// provider prepares the measurement of one provider with a peer process.
func (b *bench) provider(name string) *source {
	src := &source{col: newColumn(name)}
	c := &src.col
	job := fmt.Sprintf("bench%d", os.Getpid())
	dev, err := rdmaio.Open(name, rdmaio.Config{Job: job, Rank: 0, LocalSize: 2})
	if err != nil {
		c.note = "unavailable"
		if errors.Is(err, rdmaio.ErrNoDevice) {
			c.note = "no device"
		}
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return src
	}
	cmd := exec.Command(os.Args[0], "-peer", name)
	cmd.Env = append(os.Environ(), rdmaiotest.PeerEnv+"="+job)
	s, err := rdmaiotest.StartSession(dev, cmd, rdmaiotest.SessionConfig{})
	if err != nil {
		c.note = "failed"
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		dev.Close()
		return src
	}
	src.close = func() {
		if err := s.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		}
		dev.Close()
	}
	type item struct {
		m    int
		fn   func(n int) error
		conv func(time.Duration) float64
	}
	items := []item{
		{mHalfRTT, s.PingPong, usPerHop},
		{mWriteLat, func(n int) error { return s.OneSided(rdmaio.OpRDMAWrite, n) }, usPerOp},
		{mReadLat, func(n int) error { return s.OneSided(rdmaio.OpRDMARead, n) }, usPerOp},
		{mRate, func(n int) error { return s.Send(8, rdmaiotest.RateWindow, 32, n) }, mops},
	}
	for i, size := range rdmaiotest.BandwidthSizes {
		items = append(items,
			item{mWriteBW4K + i, func(n int) error { return s.Write(size, rdmaiotest.Window, n) }, gbps(size)},
			item{mSendBW4K + i, func(n int) error { return s.Send(size, rdmaiotest.Window, 1, n) }, gbps(size)})
	}
	src.round = func() error {
		for _, it := range items {
			op, err := b.measure(it.fn)
			if err != nil {
				return fmt.Errorf("%s: %w", metricNames[it.m], err)
			}
			best(c, it.m, it.conv(op))
		}
		return nil
	}
	return src
}

// spin prepares the shared-memory reference.
func (b *bench) spin() *source {
	src := &source{col: newColumn("spin ref")}
	src.round = func() error {
		op, _ := b.measure(func(n int) error { rdmaiotest.SpinPingPong(n); return nil })
		best(&src.col, mHalfRTT, usPerHop(op))
		return nil
	}
	return src
}

// rawTCP prepares the TCP reference.
func (b *bench) rawTCP() *source {
	src := &source{col: newColumn("raw TCP ref")}
	src.round = func() error {
		op, err := b.measure(func(n int) error { _, err := rdmaiotest.TCPPingPong(n); return err })
		if err != nil {
			return fmt.Errorf("raw TCP: %w", err)
		}
		best(&src.col, mHalfRTT, usPerHop(op))
		return nil
	}
	return src
}

// servePeer is the peer process: rank 1 of the job in PeerEnv.
func servePeer(name string) error {
	job := os.Getenv(rdmaiotest.PeerEnv)
	if job == "" {
		return fmt.Errorf("-peer without %s", rdmaiotest.PeerEnv)
	}
	dev, err := rdmaio.Open(name, rdmaio.Config{Job: job, Rank: 1, LocalSize: 2})
	if err != nil {
		return err
	}
	if err := rdmaiotest.ServePeer(dev, os.Stdin, os.Stdout); err != nil {
		dev.Close()
		return err
	}
	return dev.Close()
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func find(cols []column, name string) *column {
	for i := range cols {
		if cols[i].name == name {
			return &cols[i]
		}
	}
	return nil
}

// targets returns the target and the verdict of metric m.
func targets(cols []column, m int) (string, string) {
	shm, tcp, raw, spin := find(cols, "shm"), find(cols, "tcp"), find(cols, "raw TCP ref"), find(cols, "spin ref")
	verdict := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "MISS"
	}
	switch m {
	case mHalfRTT:
		var res []string
		if shm != nil && !math.IsNaN(shm.v[m]) {
			v := "shm " + verdict(shm.v[m] <= 0.10)
			// The spin reference is the machine's floor: where it is
			// above the target, no queue can meet it here.
			if spin != nil && !math.IsNaN(spin.v[m]) {
				v += fmt.Sprintf(" (%.2f× the spin floor", shm.v[m]/spin.v[m])
				if spin.v[m] > 0.10 {
					v += ", itself above 0.10"
				}
				v += ")"
			}
			res = append(res, v)
		}
		if tcp != nil && raw != nil && !math.IsNaN(tcp.v[m]) && !math.IsNaN(raw.v[m]) {
			r := tcp.v[m] / raw.v[m]
			res = append(res, fmt.Sprintf("tcp/raw %.2f× %s", r, verdict(r <= 1.2)))
		}
		return "shm ≤ 0.10; tcp ≤ 1.2× raw TCP", strings.Join(res, ", ")
	case mWriteBW1M, mSendBW1M:
		if shm != nil && !math.IsNaN(shm.v[m]) {
			return "shm ≥ 13", "shm " + verdict(shm.v[m] >= 13)
		}
		return "shm ≥ 13", ""
	}
	return "", ""
}

func printTable(cols []column, runs int, target time.Duration, load0, load1 string, took time.Duration) {
	fmt.Printf("rdmaio providers, two processes (references: two threads), best of %d runs of about %v each; GOMAXPROCS %d, %d CPUs\n",
		runs, target, runtime.GOMAXPROCS(0), runtime.NumCPU())
	fmt.Printf("load average %s at the start, %s at the end (%.0f s)\n", load0, load1, took.Seconds())
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	head := "metric\t"
	for _, c := range cols {
		head += c.name + "\t"
	}
	fmt.Fprintln(w, head+"target\tresult\t")
	for m := range nMetrics {
		line := metricNames[m] + "\t"
		for _, c := range cols {
			switch v := c.v[m]; {
			case c.note != "":
				line += c.note + "\t"
			case math.IsNaN(v):
				line += "—\t"
			case v >= 100:
				line += fmt.Sprintf("%.0f\t", v)
			case v >= 10:
				line += fmt.Sprintf("%.1f\t", v)
			default:
				line += fmt.Sprintf("%.3f\t", v)
			}
		}
		t, r := targets(cols, m)
		fmt.Fprintln(w, line+t+"\t"+r+"\t")
	}
	w.Flush()
	fmt.Println("GB/s = 10^9 bytes per second; 16 operations in flight for bandwidth, 256 for the message rate.")
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "rdmaio: "+format+"\n", args...)
	os.Exit(2)
}
