// Package qtransport is a transport.Transport over rdmaio queue pairs: the
// binding that runs package comm on the RDMA-style queues of package rdmaio
// (shared memory between ranks of one host, soft RDMA over TCP, or real
// verbs), whichever provider reaches each peer.
//
// # Construction
//
// A rank opens its rdmaio device(s) and calls New with its rank, the number
// of ranks, the device that reaches each peer and an all-gather function
// (runtime.(*Runtime).Exchange in a job, LocalExchange for ranks that are
// goroutines of one process):
//
//	tr, err := qtransport.New(ctx, qtransport.Config{
//		Rank: r.Rank(), Size: r.Size(),
//		Devices:  []rdmaio.Device{shmDev},     // one device for every peer
//		Exchange: r.Exchange,
//	})
//	world, err := comm.NewWorld(tr, nil)
//
// Config.Devices names one device per peer, so a job can reach the ranks of
// its own host over "shm" and the others over "tcp" or "verbs"; both ends of
// a pair must use the same provider. New creates, per distinct device, a
// protection domain, one completion queue, a shared receive queue (SRQ) with
// a pool of receive buffers, and per peer one RC queue pair. It publishes
// the device addresses and queue pair numbers with the all-gather, moves
// every queue pair through RESET → INIT → RTR → RTS and ends with a second
// all-gather, so that no rank sends before every rank can receive, and so
// that a failure on one rank fails New on every rank instead of hanging.
// Every rank must call New together, with the same Config.Key and
// Options.EagerLimit.
//
// # Sending
//
// Send copies the message before it returns: a message of at most the
// queue pair's inline limit is posted inline (the provider copies it during
// the post; one whose queue pair implements rdmaio.InlineQP hands it the
// header and the payload apart, and the provider copies them once, for shm
// straight into the receiver's ring); a larger one is copied into the peer's bounce ring, memory
// from PD.Alloc (for shm, shared memory that the receiver copies from
// directly) and sent from there. Sends are unsignaled except every so often
// and whenever the send queue or the bounce ring runs low, so that a
// completion always comes back to free them. When the send queue or the
// bounce ring is full, the message is copied to a software backlog of the
// peer, flushed in order (as a chain of work requests, one doorbell) as
// completions free room: Send never waits for the peer to poll, and nothing
// is lost or reordered. The backlog is flushed from Poll; when the rank
// stops polling while a backlog waits (it went on computing, or finished),
// a progress goroutine of the device polls in its stead after 100 µs
// without a Poll, so that the peers still get every message. A message to
// the rank itself goes through a queue in memory.
//
// AllocStage (transport.Stager) hands out shared memory of the shm device
// for comm to pack large vector sends into: once registered, the readers
// on this host (StagedTo) copy from it directly instead of through
// process_vm_readv. It is freed at Close.
//
// SendShortHeld (transport.Batcher, used by comm for non-blocking eager
// sends) may leave a message in the peer's chain of work requests, its
// bytes copied, so that a window of small messages costs a few doorbells
// rather than one each. The chain is posted when it is full, by the next
// Flush, Poll, Wait, Send, SendShort or Close, and by the progress
// goroutine once 100 µs pass without any of them; Idle reports false while
// a message is held. Held messages keep their order with every other
// message to the peer.
//
// The receiver's messages land in the buffers of its SRQ (one pool for all
// peers, so receive memory does not grow with the number of ranks); Poll
// hands each to Handler.Deliver and reposts the buffers in batches, when
// it finds nothing else to do (or when many wait), so that reposting does
// not delay a message on its way to the receiver. Where the completion
// queue can deliver small messages without a receive request
// (rdmaio.DirectCQ: shm copies the ones its ring carries), Poll has them
// copied into a buffer of the device instead, handed out in the same
// order, and no receive buffer is consumed or reposted. Queue pairs retry a SEND
// that finds no receive posted for ever (rdmaio.RNRRetryInfinite), so a
// burst that exhausts the pool is delayed, never lost. The receive buffers hold Caps.MaxMsg bytes: the eager limit
// plus room for comm's header. New writes to every page of the receive
// buffers (and a bounce ring is written through when it is allocated), so
// that the first pass of messages through fresh memory does not pay page
// faults: the pool hands out its buffers in turn, and on virtual machines
// a first touch costs tens of microseconds a page, more than a mid-size
// message (Options.Lazy leaves the bounce rings to the messages).
//
// # One-sided operations
//
// Register registers a buffer on every device for remote read and write and
// returns a Region whose Key holds the remote key of each device (at most
// two devices with the same addressing; otherwise Caps.OneSided is false).
// Registrations are reference-counted and kept, when no longer used, in a
// small cache (Options.RegCache): comm registers the buffer of every
// rendezvous send, and registering costs more than copying tens of
// kilobytes. Read posts RDMA READs from the peer's region into the local
// pieces, straight into them when they are registered already (the cache),
// else through the bounce ring up to Options.ReadBounce bytes and into
// newly registered pieces above that. Write is the mirror image with RDMA
// WRITE. Completions are reported through Handler.Complete from Poll.
//
// # Waiting
//
// Poll never blocks and allocates nothing. Wait waits in the provider
// (rdmaio.CQ.Wait: spin, then yield, then sleep); with several devices it
// waits on all of them at once, so that it never sleeps on one while
// another has work. Completions that Wait takes from a queue are kept, in
// order, for the next Poll. Idle (transport.Idler) tells without a lock
// that a Poll would hand out nothing, when every device's completion queue
// can tell that (rdmaio.IdleCQ): a spinning waiter then skips the Poll and
// its locks. A waiter that expects a message from one rank watches that
// rank's queue pair alone (transport.Taker: Arrived, Take) when the queue
// pair can offer its next message where it lies (rdmaio.TakeQP, on a
// device that polls directly): the message goes from the provider's ring
// into the waiter's hands with no completion, ready queue or Poll, unless
// a Poll has collected messages that are not handed out yet. The provider
// acknowledges a message so taken with the queue pair's next post (usually
// the answer), Take or poll. A send that finds the completions of earlier
// sends lagging by half its queue collects them itself.
//
// # Closing
//
// Close stops accepting work, then polls every device once (which sends
// the acknowledgements still owed) and lingers (Options.Linger) while
// queued and outstanding messages drain, so that messages sent before Close
// are not lost when the peer is still receiving; then it moves every queue
// pair to the error state, collects the flushed completions and destroys
// what New created. It must not be called from inside a Handler. Ranks in
// one process close together with CloseAll, as the processes of a job do:
// one after the other, each would linger for what the next still owes it.
package qtransport
