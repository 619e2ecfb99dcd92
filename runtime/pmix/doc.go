// Package pmix is a client of the PMIx process-management interface, the
// one Slurm offers with `srun --mpi=pmix` and Open MPI's launchers offer by
// default, so that a jiarun program started by them, without jiarun, still
// finds its rank, its size and its peers.
//
// The client itself (Init, Put, Commit, Fence, Get, Abort, Finalize) calls
// the PMIx library through cgo and is built only with the build tag pmix:
//
//	CGO_ENABLED=1 go build -tags pmix ./app
//
// which needs the library's development files (pkg-config name "pmix";
// Debian's libpmix-dev). The rest of the package is pure Go and present in
// every build: Started, which tells from the environment whether a PMIx
// server started this process; Available, whether this build has the
// client; key checks; and the mapping of PMIx status codes to Go errors
// (Status, Error).
//
// Values are stored as PMIx byte objects with global scope (visible to
// every process of the job), and Fence asks the server to collect the data,
// so that Get of a peer's key after the fence is answered locally.
package pmix
