// Package runtime is a rank's life in a jiarun job: it reads the launch
// contract that jiarun puts in the environment, opens the rank's endpoint
// (exactly one TCP listening port and one UDP endpoint for the rank's whole
// life: n ports for n ranks, never n²), publishes the rank's card at the
// rendezvous and learns every other rank's card, and ends the rank with
// Finalize or Abort.
//
// The launch contract is a set of JIA_* environment variables (see the Env
// constants). A program started without them is a singleton, rank 0 of 1,
// so `go run ./apps/hello` works without jiarun.
//
// The package also offers a bootstrap byte path between ranks (SendBytes,
// RecvBytes) over authenticated TCP connections set up lazily on first use.
// The message-passing layer (package comm) and the shared memory (package
// shmem) run on the rdmaio queues instead.
//
// The package is named after its directory; import it with another name
// where the standard library's runtime is also needed.
package runtime
