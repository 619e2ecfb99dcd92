// Package verbs is the rdmaio provider for InfiniBand and RoCE hardware:
// libibverbs through cgo, built only with the build tag verbs (it needs
// libibverbs and its headers, Debian's libibverbs-dev). Import it for its
// side effect of registering the provider "verbs":
//
//	import _ "github.com/jiarun/jia/rdmaio/verbs"
//
//	dev, err := rdmaio.Open("verbs", rdmaio.Config{Job: job, Rank: rank})
//
// Without the tag the package holds only its portable parts (address
// encoding, the tables that map rdmaio values to verbs values) and registers
// nothing. On a machine without an RDMA device (or whose kernel has no RDMA
// support) Open fails with an error wrapping ErrNoDevice, which wraps
// rdmaio.ErrNoDevice and reads "no RDMA device".
//
// # Devices and addresses
//
// Open takes the first device with an active port (or the one named by
// option device, and the port named by option port). The device address
// (Device.Addr, published in the endpoint card) holds the rank, the port's
// link layer, LID, path MTU, the GID of the selected GID table entry and a
// hash of the job; an address of another job, or of another link layer, is
// refused by CreateAH and by INIT → RTR with rdmaio.ErrBadAddress. On
// InfiniBand peers are addressed by LID; on Ethernet (RoCE) by GID, with a
// GRH. The GID index is chosen as the rdma-core tools do: a RoCE v2 entry
// with an IPv4-mapped address first, then RoCE v2 with a global IPv6
// address, then any RoCE v2 entry, then RoCE v1; option gid_index overrides
// the choice.
//
// # Objects
//
// Every rdmaio object is the verbs object of the same name. Memory regions
// register either memory from PD.Alloc (anonymous mmap'd memory, outside
// the Go heap) or ordinary Go memory, which is pinned with runtime.Pinner for
// as long as it is registered. Registration locks pages in memory: raise
// RLIMIT_MEMLOCK (ulimit -l) for large regions. Access rights, QP types and
// states, opcodes and completion statuses have the values of libibverbs, so
// they pass through unchanged.
//
// QP transitions are ibv_modify_qp calls with the attribute masks verbs
// requires: RESET → INIT sets the port, P_Key index 0 and the access flags
// (RC) or the Q_Key (UD); INIT → RTR (RC) the address vector, path MTU (the
// smaller of both ports'), destination QPN, receive PSN, RNR timer and
// responder resources; RTR → RTS the retry counts, the local ACK timeout and
// the send PSN. Work requests are checked with package rdmaio/provider and
// then posted as one chained ibv_post_send or ibv_post_recv per batch,
// built in work request and SGE arrays allocated once per QP: posting and
// polling do not allocate.
//
// # UD
//
// A UD receive in verbs starts with the 40-byte global routing header. The
// provider hides it, as the rdmaio API specifies: it adds an SGE of its own
// in front of each receive's scatter list, pointing at a per-QP header slot,
// so the payload lands at the start of the caller's buffer and the
// completion's ByteLen counts the payload only. The header gives the sender's
// GID (or the completion its LID) and thereby SrcRank, for senders this
// device has created an address handle for or connected to; SrcRank is -1
// for other senders and for ports that several ranks share (ranks on one
// adapter have the same LID and GID).
//
// # Completions
//
// Poll takes completions from the hardware in batches into an array
// allocated with the CQ. Because verbs does not report the opcode of a
// failed work request, the provider keeps each queue's outstanding work
// requests (their IDs and opcodes) and reports them itself; an error
// completion marks the QP as in ERR, as the hardware has moved it there.
// Wait polls under the rdmaio/provider wait policy and, in its sleeping
// phase, arms the CQ's completion channel and sleeps on its descriptor. A
// CQ grows (ibv_resize_cq) as QPs attach to it, so that it cannot overflow.
//
// # Options
//
// Config.Options may set (defaults in parentheses):
//
//	device      device name, e.g. mlx5_0 (the first with an active port)
//	port        port number (the first active port)
//	gid_index   GID table index (chosen as above)
//	max_inline  inline payload limit (256); a QP whose QPCap.MaxInline is zero
//	            gets the largest power-of-two fraction the adapter accepts
//	spin, yield, sleep   Wait policy as durations (provider.DefaultWaitPolicy)
package verbs
