// Package provider is the toolkit for writing rdmaio providers: the parts of
// verbs semantics that do not depend on how bytes move, kept here so that
// every provider (shm, tcp, verbs) enforces them identically and stays thin
// I/O.
//
//   - The QP state machine: CheckTransition, CanPostSend, CanPostRecv,
//     Receives.
//   - Work request validation: CheckSendWR (opcode per QP type, SGL length,
//     inline and UD MTU limits, atomics' size and alignment) and
//     CheckRecvWR, which refuse a post; CheckLocal and CheckRemote, which
//     decide the error completion of a memory reference (rights, bounds);
//     LocalAccess and RemoteAccess, the rights each opcode needs.
//   - KeyTable, a lock-free key → object table with verbs-style 8-bit key
//     tags, for memory region keys.
//   - Scatter/gather copies over resolved buffers: Gather, Scatter, CopySG.
//   - RecvQueue, the ring of posted receive work requests of a provider
//     that resolves their SGEs when they are posted (through a
//     LocalResolver), and Overlaps, for the checks that memory is still
//     named by outstanding work.
//   - The adaptive waiting policy (spin, then yield, then sleep):
//     WaitPolicy, DefaultWaitPolicy, Backoff.
//
// Remote addresses in rdmaio are (rkey, address) pairs in the target
// region's address space. A provider resolves them only through the target's
// own registration (CheckRemote with the region's base, size and rights),
// never by trusting a pointer that came from a peer.
package provider
