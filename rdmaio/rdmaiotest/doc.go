// Package rdmaiotest is the conformance suite of rdmaio providers. A
// provider's tests implement Fabric (open n devices acting as ranks of one
// job, able to reach each other from this process) and call Run:
//
//	func TestConformance(t *testing.T) { rdmaiotest.Run(t, myFabric{}) }
//
// The suite covers, each in its own subtest:
//
//   - object lifetimes and device attributes (Objects);
//   - the QP state machine: illegal transitions, posts in the wrong state,
//     receives in INIT, flush in ERR, reconnect after RESET (StateMachine);
//   - SEND/RECEIVE of 1 byte to 1 MiB between ordinary and provider-allocated
//     memory in all four combinations, and one 64 MiB message
//     (SendRecvSizes, SendRecv64MiB);
//   - immediates of SEND and RDMA WRITE (Immediate); inline payloads
//     (Inline);
//   - RC ordering: 2000 messages in order, a WRITE visible when a later SEND
//     arrives, a READ after a WRITE (Ordering);
//   - 32-element gather lists scattered over other receive lists
//     (LargeSGL);
//   - RDMA WRITE and READ at many offsets and sizes (ReadWriteOffsets);
//   - fetch-and-add and compare-and-swap from three ranks at once on one
//     word: exact count, distinct results (AtomicsContention); malformed
//     atomics (AtomicMalformed);
//   - UD between several ranks with immediates and source QPNs (UD), Q_Key
//     mismatch and no posted receive (UDQKeyMismatch), MTU limit (UDMTU),
//     and, for fabrics that implement FaultFabric, UD under 10% injected
//     loss losing exactly what the injector dropped (UDInjectedLoss);
//   - remote access errors: bad, stale and deregistered keys, out-of-bounds
//     ranges, missing rights on region or QP (RemoteAccessErrors); local
//     protection errors (LocalProtection); receive buffer too small
//     (RecvTooSmall);
//   - receiver-not-ready: retries exhausted, and infinite retries that
//     succeed once a receive is posted (RNR);
//   - completion batching, unsignaled requests and SigAll
//     (CompletionBatching); many QPs on one CQ (ManyQPsOneCQ); SRQ;
//   - queue depth limits, including verbs' reclaiming of unsignaled slots
//     (QueueDepth);
//   - teardown: flush with work outstanding, destroying everything with work
//     outstanding without errors, hangs or goroutine leaks
//     (TeardownFlush, TeardownOutstanding), a peer that closes
//     (PeerClosed);
//   - unregistered and freed memory (FreedMemory); CQ.Wait (CQWait), and
//     its deadline kept with a context whose Done never closes
//     (CQWaitDeadline); bad peer addresses (BadAddress).
//
// Tests never assert on timing; timeouts (a minute) only guard against
// hangs. A fabric that implements LeakChecker is asked after each test
// whether anything was left behind.
package rdmaiotest
