// Package hostcpu tells how many processors the ranks of a job share on
// this host. It is what decides whether a rank may poll (ranks fit on the
// processors) or must give its processor away (ranks outnumber them).
//
// A rank bound to one processor (jiarun --bind-to core, or a batch
// system's binding) sees only that processor in runtime.NumCPU, yet its
// peers on the host run on the others: so the launcher passes the number
// of processors it may use on the host in the environment variable Env,
// and Count prefers it. A process started without it (a test, a program
// run on its own) counts the processors it may run on.
package hostcpu

import (
	"os"
	"runtime"
	"strconv"
	"sync"
)

// Env is the environment variable in which the launcher passes the number
// of processors the job's ranks may use on their host.
const Env = "JIA_HOST_CPUS"

// Count returns the number of processors the ranks of this host share:
// the value of Env when it is a positive integer, else runtime.NumCPU.
// It is read once.
func Count() int { return count() }

var count = sync.OnceValue(func() int { return parse(os.Getenv(Env)) })

// parse returns the processor count v names, or runtime.NumCPU when v is
// not a positive integer.
func parse(v string) int {
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return n
	}
	return runtime.NumCPU()
}
