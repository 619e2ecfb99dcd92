// Package tcp is the rdmaio provider for ranks on different hosts: soft RDMA
// over TCP (RC) and UDP (UD), with the verbs semantics of package rdmaio.
// Import it for its side effect of registering the provider "tcp":
//
//	import _ "github.com/jiarun/jia/rdmaio/tcp"
//
//	dev, err := rdmaio.Open("tcp", rdmaio.Config{Job: job, Rank: rank, Secret: secret})
//
// # Endpoints
//
// A device listens on one TCP port and owns one UDP socket, on the loopback
// address unless option addr says otherwise. Device.Addr is the blob a rank
// publishes in its endpoint card (rdmaio.Card): both addresses, the rank, a
// random device id (a restarted device at the same ports is told apart) and
// a hash of the job (an address of another job is refused by CreateAH and
// by INIT → RTR with rdmaio.ErrBadAddress).
//
// # Connections and authentication
//
// Each connected RC QP pair has its own TCP connection, made lazily when
// the QPs go to RTR, so a job of n ranks opens connections only between QPs
// that are actually connected. Of the two QPs, the one with the smaller
// (device id, QPN) dials, within its INIT → RTR; the other adopts the
// connection (which waits, parked, if it arrives before that QP's RTR) or
// expects it within the connect timeout. The dialer speaks first (a
// greeting, so that a lost last packet of TCP's handshake is repaired by
// the dialer's retransmission within a fraction of a second; a connect
// unanswered for 3 s is abandoned for a fresh one), the acceptor answers
// with a fresh nonce;
// the dialer proves that it knows the job secret (rdmaio.Config.Secret) and
// the job name with an HMAC-SHA256 over the nonce and both QPs' identities;
// the acceptor answers with its own proof over the dialer's nonce. A peer
// that fails is refused and closed (the dialer's Modify returns an error
// wrapping ErrAuth); the secret never crosses the wire. UD datagrams carry
// a per-job token derived from the secret and are dropped without it: that
// keeps other jobs' traffic out, but unlike the RC handshake it does not
// stop an attacker who can read the network.
//
// # RC transport
//
// Requests carry a packet sequence number. The responder executes them in
// order, exactly once: SENDs into the next receive (straight from the socket
// into the receive buffers for large messages), RDMA WRITEs into the target
// region, RDMA READs from it and atomics with the processor's atomic
// instructions, always after checking the key, bounds and rights against its
// own registration and the QP's access flags. This is done by the target's
// provider — in a Poll of the target program or in the device's service
// goroutine — without the target program's involvement. The response to a
// large RDMA READ goes from the registered memory into the socket and from
// the socket straight into the requester's buffers: while one is due, the
// requester reads frame headers no further than their end. Acknowledgements
// are cumulative and coalesced: a signaled request asks for one at once,
// others ride along with the next frame in that direction. (A busy poller
// of a process with one device holds even the one asked for back until the
// program's next Poll or Post, so that it rides along with an immediate
// answer; a program that stops polling leaves it to the service goroutine,
// which sends it within about a millisecond.)
//
// Errors follow verbs: a bad remote key, range or right completes the
// request with StatusRemAccessErr; a message longer than the receive buffer
// completes the receive with StatusLocLenErr and the send with
// StatusRemInvReqErr; an error completion moves the QP to ERR, flushes its
// work and closes its connection, and the responder drops everything after
// the failed request. A SEND (or RDMA WRITE with immediate) that finds no
// receive posted is refused with a receiver-not-ready NAK and dropped
// together with what follows it; the requester sends it again after the
// responder's MinRNRTimer, up to RNRRetry times (for ever with
// rdmaio.RNRRetryInfinite), then completes it with StatusRNRRetryExcErr.
// A connection that breaks (the peer closed or died) completes the oldest
// outstanding send with StatusRetryExcErr and VendorErr set to the errno; an
// idle QP notices at its next send. A peer that is connected but hung (its
// process stopped: the kernel still takes the bytes, nobody answers) is
// caught by the retry timer: when work that expects an answer (a request
// not yet written, a signaled request, a READ or an atomic) sees nothing
// move on the connection for QPAttr.Timeout × (RetryCount+1) (Timeout 0:
// option retry_timeout), the connection is dropped and the oldest
// outstanding send completes with StatusRetryExcErr and VendorErr
// ETIMEDOUT. SendFence is implied: the responder executes every request in
// order.
//
// # UD transport
//
// A UD send is one datagram from the device's UDP socket; it completes as
// soon as it is sent, whether or not it arrives. The receiver drops
// datagrams with another Q_Key, for a QP that does not exist or does not
// receive, larger than its MTU, or that find no receive posted. Payloads
// larger than the MTU are refused at post time (rdmaio.ErrMessageTooLong).
// With the default MTU of 4096 bytes a datagram is fragmented by IP on an
// Ethernet of MTU 1500; set option mtu to 1400 or so to avoid that.
//
// # Fault injection
//
// For testing upper layers against loss, options ud_drop, ud_dup, ud_delay
// and ud_reorder make the sender drop, duplicate, delay (by ud_delay_time)
// or let the next datagram overtake each UD datagram with the given
// probability, decided by a generator seeded with ud_seed (random when
// unset). Device.FaultStats counts what was done.
//
// # Progress
//
// Sockets are non-blocking descriptors driven with raw system calls. While
// the program polls (CQ.Poll, or CQ.Wait in its spin and yield phases), each
// Poll runs a progress pass itself — busy polling, with no thread hand-off on
// the path of a message: it reads the connection that had data last straight
// away (taking it out of the epoll set meanwhile, so that the kernel does not
// update epoll for every segment), and asks epoll_wait with a zero timeout
// about everything else every 8 to 64 passes. Posting writes to the socket
// directly, with one system call for a chain of work requests: a small
// message goes out as one buffer, header and payload together, with
// send(2); larger ones with sendmsg(2) straight from their buffers. A Poll
// that finds nothing yields the processor now and then, so that a polling
// loop does not starve other goroutines: often with GOMAXPROCS=1, rarely
// with more, since a yield wakes a thread for an idle processor, which on
// a host whose cores all poll takes one from a peer rank.
//
// When nobody polls (the program computes, or Wait sleeps) the device's
// service goroutine takes over: it spins for option service_spin after the
// last activity, then blocks in epoll_wait, so that one-sided operations
// against this rank, acknowledgements, RNR retries and connection set-up go
// on. While pollers are active it sleeps on a timer that they keep pushing
// back, so that it wakes (and takes a processor from them) only a
// millisecond after they stop. Posting and polling do not allocate.
//
// # Options
//
// Config.Options may set (defaults in parentheses):
//
//	addr             IP address or host name to listen on, optionally with a
//	                 TCP port (127.0.0.1, ephemeral port); 0.0.0.0 or :: listen
//	                 on every interface and publish the first non-loopback address
//	udp_port         UDP port (ephemeral)
//	mtu              UD path MTU in bytes, 256..65000 (4096)
//	max_qp, max_mr, max_cq, max_srq   table sizes (1024, 4096, 64, 16)
//	spin, yield, sleep                Wait policy as durations (provider.DefaultWaitPolicy)
//	service_spin     how long the service goroutine spins before it blocks (spin)
//	connect_timeout  bound on connection set-up (10s)
//	retry_timeout    QPAttr.Timeout when that is zero (4s)
//	udp_rcvbuf       receive buffer of the UDP socket in bytes, 0 for the
//	                 kernel's default (8 MiB; beyond net.core.rmem_max only
//	                 with CAP_NET_ADMIN)
//	sndbuf           send buffer of each RC connection in bytes (SO_SNDBUF,
//	                 which the kernel doubles), 0 for the kernel's, which
//	                 grows with the transfer (256 KiB); see below
//	ud_drop, ud_dup, ud_delay, ud_reorder   UD fault probabilities (0)
//	ud_delay_time    delay of delayed and reordered datagrams (1ms)
//	ud_seed          seed of the fault generator (random)
//
// # Send buffers
//
// Each RC connection's send buffer is fixed at a small size (option
// sndbuf) instead of left to the kernel, which grows it to megabytes under
// a stream of large messages. Those megabytes are queued between the
// sender's copy into the kernel and the receiver's copy out of it, long
// enough to leave the processors' caches: each byte is then written to
// memory and read back. Between two hosts over a virtual Ethernet the
// default moved streams of messages of 256 KiB to 4 MiB about twice as
// fast as the kernel's own sizing. Half of it streams faster still, but a
// single message larger than the buffer then waits for the receiver's
// acknowledgements to drain it (the latency of 256 KiB doubled). A path
// whose bandwidth-delay product exceeds twice the buffer (a long path, or
// a very fast one) is held below its speed: raise sndbuf there, or set it
// to 0 (jiarun jobs: transport.tcp_send_buffer in jia.toml).
//
// # Limits
//
// MaxQPWR 16384, MaxSGE 64, MaxInline 1024, MaxMsgSize 2 GiB. PD.Alloc
// returns anonymous memory outside the Go heap; any memory can be
// registered.
package tcp
