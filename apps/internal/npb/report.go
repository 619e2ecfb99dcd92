package npb

import (
	"fmt"
	"io"
	"math"
	"math/cmplx"
	"strings"
)

// Result is the outcome of one kernel run, the same on every rank.
type Result struct {
	Kernel     string  // "EP", "IS", "CG", "MG" or "FT"
	Class      byte    // 'S', 'W', 'A', 'B' or 'C'
	Size       [3]int  // problem size as NPB prints it; Size[1:] are 0 for a one-number size
	Iterations int     // NPB's iteration count (0 for EP, as NPB prints)
	Ranks      int     // number of ranks
	Time       float64 // seconds in NPB's timed region, maximum over ranks
	Mops       float64 // Mop/s total, by NPB's operation count
	OpType     string  // what Mops counts, as NPB labels it
	Verified   bool    // every check passed
	Checks     []Check // the quantities NPB verifies
}

// MopsPerRank is Mop/s total divided by the number of ranks.
func (r *Result) MopsPerRank() float64 { return r.Mops / float64(r.Ranks) }

// Check is one verified quantity: the computed value against NPB's
// reference. Real quantities have zero imaginary parts. Epsilon 0 means the
// check is exact (IS).
type Check struct {
	Name      string
	Value     complex128
	Reference complex128
	RelErr    float64 // |Value-Reference| / |Reference| (complex modulus)
	Epsilon   float64
	OK        bool
}

// relCheck builds a Check that passes when the relative error is at most
// eps; NaN fails, as in NPB.
func relCheck(name string, value, ref complex128, eps float64) Check {
	e := cmplx.Abs((value - ref) / ref)
	return Check{Name: name, Value: value, Reference: ref, RelErr: e, Epsilon: eps,
		OK: !math.IsNaN(e) && e <= eps}
}

// exactCheck builds a Check on counts that must match exactly.
func exactCheck(name string, value, ref int64) Check {
	c := Check{Name: name, Value: complex(float64(value), 0), Reference: complex(float64(ref), 0), OK: value == ref}
	if !c.OK {
		c.RelErr = math.Abs(float64(value-ref)) / math.Max(1, math.Abs(float64(ref)))
	}
	return c
}

func allOK(cs []Check) bool {
	for _, c := range cs {
		if !c.OK {
			return false
		}
	}
	return len(cs) > 0
}

// verification is the word NPB prints after "Verification =".
func (r *Result) verification() string {
	if r.Verified {
		return "SUCCESSFUL"
	}
	return "UNSUCCESSFUL"
}

// Report writes NPB's familiar end-of-run report (common/print_results.f),
// followed by the verified quantities with their reference values.
func (r *Result) Report(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "\n\n %s Benchmark Completed.\n", r.Kernel)
	fmt.Fprintf(&b, " Class           = %24c\n", r.Class)
	if r.Size[1] == 0 && r.Size[2] == 0 {
		fmt.Fprintf(&b, " Size            = %24d\n", r.Size[0])
	} else {
		fmt.Fprintf(&b, " Size            = %24s\n", fmt.Sprintf("%4dx%4dx%4d", r.Size[0], r.Size[1], r.Size[2]))
	}
	fmt.Fprintf(&b, " Iterations      = %24d\n", r.Iterations)
	fmt.Fprintf(&b, " Time in seconds = %24.4f\n", r.Time)
	fmt.Fprintf(&b, " Total processes = %24d\n", r.Ranks)
	fmt.Fprintf(&b, " Mop/s total     = %24.2f\n", r.Mops)
	fmt.Fprintf(&b, " Mop/s/process   = %24.2f\n", r.MopsPerRank())
	fmt.Fprintf(&b, " Operation type  = %24s\n", r.OpType)
	fmt.Fprintf(&b, " Verification    = %24s\n", r.verification())
	fmt.Fprintf(&b, " Version         = %24s\n", "3.4 (jiarun Go)")
	b.WriteString("\n Verification details:\n")
	for _, c := range r.Checks {
		status := "ok"
		if !c.OK {
			status = "FAILED"
		}
		switch {
		case c.Epsilon == 0:
			fmt.Fprintf(&b, "   %-22s computed %.0f, reference %.0f  %s\n",
				c.Name, real(c.Value), real(c.Reference), status)
		case imag(c.Value) == 0 && imag(c.Reference) == 0:
			fmt.Fprintf(&b, "   %-22s computed %22.15e, reference %22.15e, rel. error %.3e <= %.0e  %s\n",
				c.Name, real(c.Value), real(c.Reference), c.RelErr, c.Epsilon, status)
		default:
			fmt.Fprintf(&b, "   %-22s computed (%.12e, %.12e), reference (%.12e, %.12e), rel. error %.3e <= %.0e  %s\n",
				c.Name, real(c.Value), imag(c.Value), real(c.Reference), imag(c.Reference), c.RelErr, c.Epsilon, status)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// RanksError reports a number of ranks a kernel cannot run on. The kernels
// return it before doing any work, on every rank alike.
type RanksError struct {
	Kernel  string
	Class   byte
	Ranks   int
	Allowed string // the rule, e.g. "a power of two from 1 to 128"
}

func (e *RanksError) Error() string {
	return fmt.Sprintf("npb: %s class %c cannot run on %d ranks: the number of ranks must be %s",
		e.Kernel, e.Class, e.Ranks, e.Allowed)
}

// CheckRanks reports whether kernel ("EP", "IS", "CG", "MG" or "FT") can run
// class on the given number of ranks, with the error the kernel itself
// would return. Launchers can call it before starting any rank.
func CheckRanks(kernel string, class byte, ranks int) error {
	if err := checkClass(kernel, class); err != nil {
		return err
	}
	switch kernel {
	case "EP", "IS":
		if ranks < 1 {
			return &RanksError{kernel, class, ranks, "at least 1"}
		}
		return nil
	case "CG":
		return cgCheckRanks(class, ranks)
	case "MG":
		return mgCheckRanks(class, ranks)
	case "FT":
		return ftCheckRanks(class, ranks)
	}
	return fmt.Errorf("npb: unknown kernel %q (want EP, IS, CG, MG or FT)", kernel)
}

// Run runs the named kernel ("EP", "IS", "CG", "MG" or "FT").
func Run(kernel string, c Comm, class byte) (Result, error) {
	switch kernel {
	case "EP":
		return RunEP(c, class)
	case "IS":
		return RunIS(c, class)
	case "CG":
		return RunCG(c, class)
	case "MG":
		return RunMG(c, class)
	case "FT":
		return RunFT(c, class)
	}
	return Result{}, fmt.Errorf("npb: unknown kernel %q (want EP, IS, CG, MG or FT)", kernel)
}

// Kernels lists the kernel names Run accepts.
var Kernels = []string{"EP", "IS", "CG", "MG", "FT"}

func isPow2(n int) bool { return n > 0 && n&(n-1) == 0 }

func ilog2(n int) int {
	l := 0
	for 1<<l < n {
		l++
	}
	return l
}

// maxTime returns the maximum of t over all ranks (NPB reports the slowest
// rank's time).
func maxTime(c Comm, t float64) (float64, error) {
	buf := []float64{t}
	if err := c.AllreduceFloat64(buf, buf, Max); err != nil {
		return 0, err
	}
	return buf[0], nil
}
