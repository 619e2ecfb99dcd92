// Package rendezvous is the bootstrap meeting point of a jiarun job, in the
// manner of PMI: every rank puts key/value pairs (its endpoint card), joins
// a fence, and gets back every pair put by any rank. The launcher (jiarun)
// runs the Server; each rank's runtime holds one Client for its whole life,
// so a rank notices when the launcher goes away (Client.Done) and the
// launcher notices when a rank dies before finalizing (Lost).
//
// # Roles
//
// The launcher creates a secret of SecretLen random bytes per job, starts a
// Server with the job's size, ID and secret, hands Server.Addr, the job ID
// and the secret to the ranks through the launch contract, and reads
// Server.Events: Connected, Refused, FenceDone, Abort, Finalized,
// AllFinalized, Lost and ProtocolError. A rank calls Dial, then Put and
// Fence as often as it needs, and ends with Finalize (or Abort).
//
// # Protocol
//
// A session over one TCP connection runs:
//
//	server → challenge  version, nonce (32 random bytes)
//	client → hello      version, job, ranks, HMAC-SHA256(secret, label‖nonce‖job‖ranks)
//	server → welcome    size, epoch              or: refused  reason, then close
//	client → put        rank, key, value         (any number)
//	client → fence      rank
//	server → fence-result  epoch, all pairs put in the epoch
//	  ... more put/fence epochs ...
//	client → finalize   rank
//	server → finalized  rank                     (the client then closes)
//
// The hello names a list of ranks. A rank's runtime names one; a per-host
// proxy may later speak for all the ranks of its host over one connection,
// and every put, fence, abort and finalize frame names the rank it is for.
//
// The secret never crosses the wire. The MAC covers the constant label
// "jiarun rendezvous v1\x00", the nonce, the job ID (uint32 length, bytes)
// and the ranks (uint32 count, then each rank as uint32), so a hello is
// bound to one connection, one job and one set of ranks. A hello with the
// wrong job ID is refused with "authentication failed (wrong job ID ...)",
// one with a bad MAC with "authentication failed (wrong job secret)"; the
// client's error then reads
//
//	rendezvous 127.0.0.1:4000: refused: authentication failed (wrong job secret)
//
// A connection must complete its hello within the server's handshake
// timeout, and frames before the hello are limited to 1 MiB, so an
// unauthenticated peer can neither hold the server nor make it allocate.
//
// # Epochs and fences
//
// Pairs belong to the epoch in which they were put; epochs count from 0 and
// each fence closes one. A fence completes when every rank that has not
// finalized has joined it, including ranks not yet connected. The server
// then encodes the epoch's pairs once, in key order, sends the same bytes to
// every connection, and starts the next epoch empty: each fence returns the
// pairs of its own epoch only. A fence with no puts is a plain barrier.
//
// Within an epoch a key belongs to the first rank that puts it; that rank
// may put it again (the last value wins), another rank may not. All pairs
// of an epoch must fit in one frame (MaxFrame).
//
// # The end of a job
//
// A rank that finalizes leaves the job cleanly and no longer holds up
// fences. When all have finalized the server reports AllFinalized.
//
// Abort ends the job: the server reports Abort, sends an aborted frame to
// every connection (the aborting rank's is its acknowledgement) and closes
// them all; Client.Err then wraps an *AbortError on every rank. A rank whose
// connection ends before it finalized, or that breaks a protocol rule, is
// Lost, which fails the job: every other connection is sent a closing frame
// with the reason ("job failed: rank 3 lost: EOF") and closed, and Client.Err
// wraps ErrServerClosed. Once a job has ended, new connections are refused
// with the same reason. The launcher decides what to do with the processes.
//
// # Frames
//
// Every frame is
//
//	uint32 length   big-endian, the number of bytes that follow, 1..MaxFrame
//	byte   type
//	...    payload
//
// Integers in payloads are big-endian uint32 (ranks, sizes and epochs below
// 2³¹; exit codes as int32). Strings and byte strings are a uint32 length
// followed by the bytes. Client-to-server types have the high bit clear;
// server-to-client types have it set:
//
//	0x01 hello        version, job, count, ranks…, mac[32]
//	0x02 put          rank, key, value
//	0x03 fence        rank
//	0x04 abort        rank, code, message
//	0x05 finalize     rank
//	0x81 challenge    version, nonce[32]
//	0x82 welcome      size, epoch
//	0x83 refused      reason
//	0x84 fence-result epoch, count, (key, value)…
//	0x85 aborted      rank, code, message
//	0x86 finalized    rank
//	0x87 closing      reason
//
// Decoding checks every length against the bytes present and rejects
// trailing bytes, unknown types and over-long keys; a malformed frame is an
// error (a refusal or a protocol error), never a panic.
//
// # Structure
//
// The protocol lives in Machine, a pure state machine in the manner of
// etcd's raft: Step takes an Input (Opened, Received, Closed, Shutdown) and
// returns Actions (Send, CloseConn, Report). It does no I/O and is tested
// rule by rule without sockets. Server drives a Machine under one lock, with
// one reading and one writing goroutine per connection; Client is the
// rank's side.
package rendezvous
