package jia

// JIAJIA's names, so that a JIAJIA program ports line by line.
//
// A JIAJIA program and its jiarun port side by side:
//
//	jia_init(argc, argv);            jia.MustInit()
//	a = jia_alloc3(n*8, 8*n, 0);     a := shmem.Slice[float64](jia.JiaAlloc3(n*8, 8*n, 0))
//	jia_lock(0); … jia_unlock(0);    jia.JiaLock(0); … jia.JiaUnlock(0)
//	jia_barrier();                   jia.JiaBarrier()
//	t = jia_clock();                 t := jia.JiaClock()
//	if (jiapid == 0) …               if jia.Jiapid() == 0 { … }
//	jia_error("bad n %d", n);        jia.JiaError("bad n %d", n)
//	jia_exit();                      jia.Finalize()
//
// jia_init has no twin here: call Init or MustInit, which also read the
// launch contract that jiarun passes (the hosts file and the command line
// stay jiarun's), and jia_exit is Finalize, which closes the DSM
// collectively first.
//
// Like their JIAJIA originals, the Jia calls return no errors: a call that
// fails ends the whole job through JiaError, naming the rank and the call.
// Programs that want to handle errors use Alloc, Lock, DSMBarrier and the
// others, which return them.

import (
	"fmt"
	"os"
	"reflect"
	"sync"
	"time"

	"github.com/jiarun/jia/shmem"
)

// clockStart is when Init started (before Init: when the program started);
// Clock counts from it.
var clockStart = time.Now()

// Clock returns the seconds since Init, as JIAJIA's jia_clock does since
// jia_init. Differences of two Clock values time a phase.
func Clock() float64 { return time.Since(clockStart).Seconds() }

// Error prints the message, formatted as by fmt.Sprintf, on standard error
// with the rank's number, and stops the whole job with exit code 1 (through
// Abort, which prints "jia: rank N: abort (code 1): message"; jiarun then
// names the rank and the message too): every rank is ended and jiarun exits
// with code 1. It does not return. Before Init it prints
// "jia: rank N: error: message" and ends only this process.
func Error(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	mu.Lock()
	r := state
	mu.Unlock()
	if r == nil {
		fmt.Fprintf(os.Stderr, "jia: rank %s: error: %s\n", envRank(), msg)
		os.Exit(1)
	}
	r.Abort(1, msg) // prints "jia: rank N: abort (code 1): msg"
}

var (
	statMu    sync.Mutex
	statStart shmem.Stats
)

// StartStats starts a statistics interval: StopStats returns what this
// rank's DSM did since. The DSM counts always; the dsm.stats setting only
// makes CloseDSM print the totals.
func StartStats() error {
	s, err := DSMStats()
	if err != nil {
		return err
	}
	statMu.Lock()
	statStart = s
	statMu.Unlock()
	return nil
}

// StopStats returns what this rank's DSM did since the last StartStats (or
// since the DSM started, without one).
func StopStats() (shmem.Stats, error) {
	s, err := DSMStats()
	if err != nil {
		return s, err
	}
	statMu.Lock()
	start := statStart
	statMu.Unlock()
	// Every counter of Stats is a uint64: subtract them all, whatever
	// counters the protocol gains later.
	v, b := reflect.ValueOf(&s).Elem(), reflect.ValueOf(start)
	for i := 0; i < v.NumField(); i++ {
		if f := v.Field(i); f.Kind() == reflect.Uint64 && f.CanSet() {
			f.SetUint(f.Uint() - b.Field(i).Uint())
		}
	}
	return s, nil
}

// Jiapid returns this rank's number (JIAJIA's global jiapid).
func Jiapid() int { return Rank() }

// Jiahosts returns the number of ranks in the job (JIAJIA's global
// jiahosts).
func Jiahosts() int { return Size() }

// JiaClock returns the seconds since the program started (JIAJIA's
// jia_clock). See Clock.
func JiaClock() float64 { return Clock() }

// JiaError prints the message with the rank's number and stops the whole
// job (JIAJIA's jia_error). See Error.
func JiaError(format string, args ...any) { Error(format, args...) }

// jiaCheck ends the job if err is not nil.
func jiaCheck(err error) {
	if err != nil {
		Error("%v", err)
	}
}

// jiaAllocHost is jia_alloc's static starthost: the host of the next
// JiaAlloc. Allocation is collective, so it moves alike on every rank.
var (
	jiaAllocMu   sync.Mutex
	jiaAllocHost = -1
)

// JiaAlloc allocates size bytes of shared memory, all homed on one rank,
// the next rank at each call (JIAJIA's jia_alloc: jia_alloc3(size, size,
// starthost) with starthost 0, 1, … in turn). It is collective.
func JiaAlloc(size int) *shmem.Region {
	jiaAllocMu.Lock()
	jiaAllocHost = (jiaAllocHost + 1) % Size()
	host := jiaAllocHost
	jiaAllocMu.Unlock()
	return JiaAlloc3(size, size, host)
}

// JiaAlloc1 allocates size bytes homed on rank 0 (JIAJIA's jia_alloc1).
func JiaAlloc1(size int) *shmem.Region { return JiaAlloc3(size, size, 0) }

// JiaAlloc2 allocates size bytes in blocks of blocksize bytes dealt to
// ranks 0, 1, … in turn (JIAJIA's jia_alloc2).
func JiaAlloc2(size, blocksize int) *shmem.Region { return JiaAlloc3(size, blocksize, 0) }

// JiaAlloc2p allocates size bytes all homed on rank proc (JIAJIA's
// jia_alloc2p).
func JiaAlloc2p(size, proc int) *shmem.Region {
	r, err := Alloc(size, shmem.OnRank(proc))
	jiaCheck(err)
	return r
}

// JiaAlloc3 allocates size bytes of shared memory in blocks of blocksize
// bytes (rounded up to whole pages) whose homes are dealt to ranks
// startHost, startHost+1, … in turn (JIAJIA's jia_alloc3). It is
// collective: every rank calls it alike. The region starts at the same
// address on every rank; view it with shmem.Slice.
func JiaAlloc3(size, blocksize, startHost int) *shmem.Region {
	if blocksize <= 0 {
		blocksize = size
	}
	pages := max(1, (blocksize+shmem.PageSize-1)/shmem.PageSize)
	r, err := Alloc(size, shmem.BlockCyclic(pages, startHost))
	jiaCheck(err)
	return r
}

// JiaLock acquires DSM lock id (JIAJIA's jia_lock). See Lock.
func JiaLock(id int) { jiaCheck(Lock(id)) }

// JiaUnlock releases DSM lock id (JIAJIA's jia_unlock). See Unlock.
func JiaUnlock(id int) { jiaCheck(Unlock(id)) }

// JiaBarrier is the coherence barrier (JIAJIA's jia_barrier). See
// DSMBarrier.
func JiaBarrier() { jiaCheck(DSMBarrier()) }

// JiaWait is a plain barrier that orders no memory (JIAJIA's jia_wait). See
// DSMWait.
func JiaWait() { jiaCheck(DSMWait()) }

// JiaSetcv sets condition variable id (JIAJIA's jia_setcv). See SetCV.
func JiaSetcv(id int) { jiaCheck(SetCV(id)) }

// JiaResetcv clears condition variable id (JIAJIA's jia_resetcv). See
// ResetCV.
func JiaResetcv(id int) { jiaCheck(ResetCV(id)) }

// JiaWaitcv waits until condition variable id is set (JIAJIA's jia_waitcv).
// See WaitCV.
func JiaWaitcv(id int) { jiaCheck(WaitCV(id)) }

// JiaStartStat starts a statistics interval (JIAJIA's jia_startstat). See
// StartStats.
func JiaStartStat() { jiaCheck(StartStats()) }

// JiaStopStat ends the statistics interval and returns what this rank's DSM
// did in it (JIAJIA's jia_stopstat, which returns nothing and prints the
// statistics at jia_exit; set dsm.stats for the totals at Finalize).
func JiaStopStat() shmem.Stats {
	s, err := StopStats()
	jiaCheck(err)
	return s
}
