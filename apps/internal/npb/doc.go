// Package npb holds the numerics of five NAS Parallel Benchmarks kernels,
// EP, IS, CG, MG and FT, faithful to NPB 3.4 (NPB3.4-MPI): the same random
// streams (each rank jumps ahead to its part of one global stream), problem
// sizes, iteration counts, timed regions, operation counts and verification
// rules, for classes S, W, A, B and C. The reference values and their
// sources are in ../shared/npb/verification.md.
//
// # Running a kernel
//
// The kernels are SPMD code: every rank calls the same function with its
// own communicator, and every rank gets the same [Result]:
//
//	res, err := npb.RunCG(comm, 'A')   // or npb.Run("CG", comm, 'A')
//	if err != nil { ... }              // *RanksError, unknown class, or a comm error
//	if comm.Rank() == 0 {
//		res.Report(os.Stdout)          // NPB's report; "Verification = SUCCESSFUL"
//	}
//
// [Result] carries the class, size, iteration count, number of ranks, the
// time of NPB's timed region (the maximum over ranks), Mop/s total and per
// rank by NPB's operation counts, and every verified quantity with its
// reference value and relative error ([Check]).
//
// # The communicator
//
// The kernels talk through [Comm], a small MPI-shaped interface holding
// exactly what they need: Barrier, Allreduce (float64, int64; sum, max,
// min), Alltoall and Alltoallv (int32 keys for IS, complex128 planes for
// FT) and Sendrecv of float64 with MPI_PROC_NULL ([ProcNull]) for CG's and
// MG's pairwise exchanges. All calls take caller-owned slices, so the timed
// loops allocate nothing. The jiarun comm package satisfies it through a thin
// adapter; package npbtest runs N ranks as goroutines in one process with
// MPI semantics (synchronous sends, so orderings that could deadlock under
// MPI deadlock there too).
//
// # Kernels and rank counts
//
//   - EP: 2^M Gaussian pairs by the polar method; the batches are
//     block-distributed. Any number of ranks.
//   - IS: ten rankings of 2^k keys by bucketed counting sort, keys moved
//     with Alltoallv as in NPB-MPI. Any number of ranks (NPB: powers of two).
//   - CG: NPB-MPI's 2-D decomposition (nprows x npcols, npcols = nprows or
//     2*nprows), with its recursive-halving row sums and transpose
//     exchanges. Powers of two.
//   - MG: NPB-MPI's 3-D block decomposition with ghost exchange, including
//     the "dead rank" handling of coarse levels that have fewer points than
//     ranks along an axis. Powers of two, at least two finest-grid points
//     per rank along every axis.
//   - FT: 1-D slab decomposition (NPB's 1D layout) with uneven slabs
//     allowed: any number of ranks from 1 to min(ny, nz) (NPB: powers of
//     two). Its own radix-4 Stockham FFT.
//
// An unsupported count is a [*RanksError], returned before any
// communication; [CheckRanks] gives the same answer without a
// communicator.
//
// # Faithfulness and speed
//
// The random numbers, the matrix and grids, the order of the floating-point
// operations that matter for verification, and the timed regions are
// NPB's. Some loops are arranged differently for speed where the results
// are the same numbers: EP draws its pairs in L1-sized chunks, keeps its
// log/sqrt chain free of branches and uses a table-driven log without a
// division (within 2 ulp of math.Log; NPB gets the C library's); MG keeps
// stencil partial sums in
// registers rather than line arrays; FT fuses evolve into the first pass of
// the inverse z-FFT, moves data between layouts inside the FFT passes, and
// multiplies by exp(ap*k^2)*exp(ap*(i^2+j^2)) instead of exp(ap*(i^2+j^2+k^2))
// (within a rounding error); IS groups its keys by destination rank instead
// of scattering them into NPB's buckets (the same buckets, split and
// messages), on two ranks with the keys that stay written straight to
// where they are ranked, and counts them in place on one rank. The timed loops allocate
// nothing (TestNoAllocInTimedRegion). Results match NPB's references to
// 1e-13 or better (IS exactly; EP's Gaussian pair counts too).
//
// # Tests and benchmarks
//
// go test runs class S of every kernel on 1, 2 and 4 in-process ranks,
// class W on 2, other rank counts (uneven FT slabs, MG's dead ranks, CG's
// non-square grids), the random number generator against its test vectors,
// and the rank-count errors; with -race it takes about a minute on two
// cores (with -race -short, class W of EP and MG is left out). BenchmarkKernels
// reports NPB's timed region and Mop/s:
//
//	go test -run - -bench Kernels -benchtime 3x ./apps/internal/npb -npb.class A -npb.ranks 1,2
//
// On a loaded machine the clock says little; BenchmarkStepCPU (Linux)
// reports the CPU time of one step of each timed loop (IS, CG, MG, FT) on
// the rank's own thread, the smallest over the iterations:
//
//	go test -run - -bench StepCPU -benchtime 10x ./apps/internal/npb -npb.class A -npb.ranks 1,2
package npb
