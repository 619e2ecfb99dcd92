// Package udtransport is a transport.Transport in which every message to a
// peer travels on the rank's one unreliable datagram (UD) queue pair, made
// reliable and ordered per peer by proto.Link: the scalable mode of UD-based
// MPIs, where a rank needs one queue pair (per device) whatever the size of
// the job, instead of one RC queue pair per peer.
//
// # Construction
//
// A rank opens its rdmaio device(s) and calls New with its rank, the number
// of ranks, the device that reaches each peer and an all-gather function
// (runtime.(*Runtime).Exchange in a job, LocalExchange for ranks that are
// goroutines of one process):
//
//	tr, err := udtransport.New(ctx, udtransport.Config{
//		Rank: r.Rank(), Size: r.Size(),
//		Devices:  []rdmaio.Device{dev}, // one device for every peer
//		Exchange: r.Exchange,
//	})
//	world, err := comm.NewWorld(tr, nil)
//
// New creates, per distinct device, a protection domain, a send and a
// receive completion queue, one UD queue pair with a Q_Key, a pool of
// receive buffers posted on it and a ring of registered send slots. It
// publishes the queue pair number, Q_Key, path MTU and device address with
// the all-gather, creates one address handle per peer and ends with a
// second all-gather, so that a failure on one rank fails New on every rank.
// Every rank must call New together.
//
// # Protocol
//
// Each peer has a proto.Link: Send hands the message to it, and it cuts the
// message into packets of at most the path MTU (the smaller of the two
// ends' MTUs, less this package's 8-byte datagram header: the sender's rank
// and a per-device cookie), numbers them, keeps them until they are
// acknowledged and retransmits them when their timeout (Options.RTO,
// doubling up to Options.MaxRTO) expires or when the peer reports them
// missing. The receiver drops duplicates, keeps early packets within the
// window, reassembles messages and acknowledges in every packet it sends
// (or in an acknowledgement-only packet). Messages to one peer therefore
// arrive exactly once and in order, whatever the network loses, duplicates
// or reorders. There are no one-sided operations (Caps.OneSided is false):
// comm then moves large messages with its two-sided rendezvous.
//
// A packet of at most the queue pair's inline limit is posted inline; a
// larger one is copied into a slot of the device's send ring. A datagram
// that cannot be posted (the send queue is full) is dropped and recovered
// by retransmission, like one lost in the network: Send never waits for the
// peer.
//
// # Progress and time
//
// Poll takes the arrived datagrams from the receive queue, runs them
// through the Links (reposting the receive buffers at once: a Link copies
// what it keeps), transmits the acknowledgements and the packets the
// acknowledgements let into the window, and hands out the messages that
// became complete, in order per peer. It also runs the retransmission
// timers when the earliest one is due. Wait sleeps in the provider
// (rdmaio.CQ.Wait) but never past the earliest retransmission timeout, so
// that a rank that only waits still retransmits. When the owner neither
// polls nor waits while packets are unacknowledged, a progress goroutine
// does both in its stead (messages it completes are kept for the next
// Poll), so that a rank that sent its last messages and went on computing
// does not keep its peers waiting. Poll and Send allocate nothing in the
// steady state.
//
// # Closing
//
// Close stops accepting work, then lingers (Options.Linger at most) while
// its Links still wait for acknowledgements, and a little longer while
// peers still send (their acknowledgements from this rank may have been
// lost), so that messages sent before Close are not lost when the peer is
// still receiving. Then it destroys what New created.
package udtransport
