package rendezvous

import (
	"bufio"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"
)

// Defaults of ServerConfig and timings of the server.
const (
	// DefaultHandshakeTimeout bounds the time from accepting a connection to
	// an accepted hello.
	DefaultHandshakeTimeout = 10 * time.Second

	// lingerTimeout bounds how long the server waits for a peer to close a
	// connection the server has closed for writing, so that the peer reads
	// the reason before the connection goes away.
	lingerTimeout = 5 * time.Second

	// closeGrace bounds how long Close waits for connections to flush.
	closeGrace = time.Second

	// eventBuffer is the capacity of the Events channel.
	eventBuffer = 64

	// keepReadBuf is the largest read buffer a connection keeps between frames.
	keepReadBuf = 64 << 10
)

// errPeerClosed is the error of a connection its peer closed.
var errPeerClosed = errors.New("connection closed by the peer")

// ServerConfig configures a Server.
type ServerConfig struct {
	// Size is the number of ranks in the job.
	Size int
	// Job is the job identifier; clients must present the same one.
	Job string
	// Secret is the per-job secret, SecretLen bytes. It never crosses the
	// wire; clients prove they know it.
	Secret []byte
	// Addr is the TCP address to listen on; "" means "127.0.0.1:0".
	Addr string
	// Logger receives the server's log; nil discards it.
	Logger *slog.Logger
	// HandshakeTimeout bounds the handshake of each connection; 0 means
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
}

// Server is the launcher's side of the rendezvous. It accepts the ranks'
// connections, drives a Machine under one lock, and reports what happens on
// Events. One goroutine reads and one writes each connection; a slow reader
// never blocks the Machine or the other connections.
type Server struct {
	log              *slog.Logger
	ln               net.Listener
	addr             string
	handshakeTimeout time.Duration

	mu     sync.Mutex // guards m, conns, nextID, closed
	m      *Machine
	conns  map[ConnID]*serverConn
	nextID ConnID
	closed bool

	wg sync.WaitGroup // accept loop and connection goroutines

	events  chan Event
	evMu    sync.Mutex
	evQueue []Event
	evKick  chan struct{}
	stop    chan struct{} // closed when Close begins
	quit    chan struct{} // closed when the event forwarder must stop
	evDone  chan struct{} // closed when the event forwarder has stopped

	closeOnce sync.Once
}

// serverConn is one accepted connection.
type serverConn struct {
	id     ConnID
	nc     net.Conn
	remote string

	mu      sync.Mutex
	queue   [][]byte // frames to write, in order
	closing bool     // the Machine closed it: flush, then close for writing
	stopped bool     // the reader is done: the writer must exit
	werr    error    // the writer's error, if any
	kick    chan struct{}
}

// NewServer listens on cfg.Addr and serves the rendezvous of one job until
// Close.
func NewServer(cfg ServerConfig) (*Server, error) {
	m, err := NewMachine(MachineConfig{Size: cfg.Size, Job: cfg.Job, Secret: cfg.Secret})
	if err != nil {
		return nil, err
	}
	addr := cfg.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: %w", err)
	}
	s := &Server{
		log:              cfg.Logger,
		ln:               ln,
		addr:             ln.Addr().String(),
		handshakeTimeout: cfg.HandshakeTimeout,
		m:                m,
		conns:            make(map[ConnID]*serverConn),
		nextID:           1,
		events:           make(chan Event, eventBuffer),
		evKick:           make(chan struct{}, 1),
		stop:             make(chan struct{}),
		quit:             make(chan struct{}),
		evDone:           make(chan struct{}),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.handshakeTimeout <= 0 {
		s.handshakeTimeout = DefaultHandshakeTimeout
	}
	s.log = s.log.With("component", "rendezvous", "job", cfg.Job)
	s.log.Debug("listening", "addr", s.addr, "size", cfg.Size)
	s.wg.Add(1)
	go s.acceptLoop()
	go s.forwardEvents()
	return s, nil
}

// Addr returns the address the server listens on (host:port), to be given
// to the ranks as the launch contract's JIA_RENDEZVOUS.
func (s *Server) Addr() string { return s.addr }

// Events returns the channel on which the server reports what happens, in
// order: Connected, Refused, FenceDone, Abort, Finalized, AllFinalized,
// Lost and ProtocolError (see each type). Events queue without bound while
// the owner is not reading, so the server never blocks on its owner. The
// channel is closed by Close; events not yet received when Close is called
// may be dropped beyond the channel's buffer.
func (s *Server) Events() <-chan Event { return s.events }

// Close stops the server: it closes the listener, tells every connection
// that the server is closing, closes them all and waits for every goroutine
// it started to exit. A peer that neither reads nor closes its end delays
// Close by at most a second. Close is safe to call more than once.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.stop)
		err = s.ln.Close()
		s.dispatch(s.m.Step(Shutdown{Reason: "rendezvous server closed"}))
		deadline := time.Now().Add(closeGrace)
		for _, c := range s.conns {
			c.nc.SetDeadline(deadline)
		}
		s.mu.Unlock()
		s.wg.Wait()
		close(s.quit)
		<-s.evDone
	})
	<-s.evDone
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// Shutdown ends the job from the launcher's side without closing the
// server: every connected rank is told reason and disconnected, and ranks
// that connect later are refused with it. Call Close afterwards.
func (s *Server) Shutdown(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dispatch(s.m.Step(Shutdown{Reason: reason}))
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: wait and retry, as
			// net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("accept failed", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-s.stop:
				return
			}
			continue
		}
		backoff = 0
		s.serve(nc)
	}
}

// Attach serves nc as if the listener had accepted it: a connection that
// reaches the server some other way, such as a rank's connection relayed by
// its host's proxy. nc is closed if the server is closed.
func (s *Server) Attach(nc net.Conn) { s.serve(nc) }

// serve registers a new connection, steps the Machine and starts the
// connection's reader and writer.
func (s *Server) serve(nc net.Conn) {
	var nonce [NonceLen]byte
	rand.Read(nonce[:]) // never fails (crypto/rand crashes the program instead)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		nc.Close()
		return
	}
	c := &serverConn{id: s.nextID, nc: nc, remote: nc.RemoteAddr().String(), kick: make(chan struct{}, 1)}
	s.nextID++
	s.conns[c.id] = c
	nc.SetReadDeadline(time.Now().Add(s.handshakeTimeout))
	s.dispatch(s.m.Step(Opened{Conn: c.id, Remote: c.remote, Nonce: nonce}))
	s.wg.Add(2)
	go s.readLoop(c)
	go s.writeLoop(c)
}

// readLoop reads frames from c and steps the Machine with them until the
// connection ends, then steps it with Closed.
func (s *Server) readLoop(c *serverConn) {
	defer s.wg.Done()
	br := bufio.NewReader(c.nc)
	authed := false
	var buf []byte
	var err error
	for {
		limit := maxHandshakeFrame
		if authed {
			limit = MaxFrame
		}
		var body []byte
		body, err = readFrame(br, buf, limit)
		if errors.Is(err, errMalformed) {
			// Bad length prefix: let the Machine give the reason, then
			// discard the rest until the peer closes or the linger ends.
			s.mu.Lock()
			s.dispatch(s.m.Step(Malformed{Conn: c.id, Err: err}))
			s.mu.Unlock()
			io.Copy(io.Discard, br)
		}
		if err != nil {
			break
		}
		if cap(body) <= keepReadBuf {
			buf = body[:0]
		}
		c.mu.Lock()
		closing := c.closing
		c.mu.Unlock()
		if closing {
			continue // drain until the peer closes or the linger ends
		}
		s.mu.Lock()
		s.dispatch(s.m.Step(Received{Conn: c.id, Body: body}))
		if !authed && s.m.Authenticated(c.id) {
			authed = true
			c.nc.SetReadDeadline(time.Time{})
		}
		s.mu.Unlock()
	}
	c.nc.Close()
	c.mu.Lock()
	c.stopped = true
	werr := c.werr
	c.mu.Unlock()
	c.wake()
	switch {
	case werr != nil:
		err = werr
	case !authed && errors.Is(err, os.ErrDeadlineExceeded):
		err = fmt.Errorf("handshake not completed within %v", s.handshakeTimeout)
	case err == io.EOF:
		err = errPeerClosed
	}
	s.mu.Lock()
	s.dispatch(s.m.Step(Closed{Conn: c.id, Err: err}))
	delete(s.conns, c.id)
	s.mu.Unlock()
}

// writeLoop writes c's queued frames in order. When the Machine has closed c
// it flushes the queue and closes the connection for writing; the reader
// then waits for the peer to close.
func (s *Server) writeLoop(c *serverConn) {
	defer s.wg.Done()
	for {
		c.mu.Lock()
		for len(c.queue) == 0 && !c.closing && !c.stopped {
			c.mu.Unlock()
			<-c.kick
			c.mu.Lock()
		}
		bufs, closing, stopped := c.queue, c.closing, c.stopped
		c.queue = nil
		c.mu.Unlock()
		if stopped {
			return
		}
		if len(bufs) > 0 {
			nb := net.Buffers(bufs)
			if _, err := nb.WriteTo(c.nc); err != nil {
				c.mu.Lock()
				c.werr = fmt.Errorf("write: %w", err)
				c.mu.Unlock()
				c.nc.Close() // the reader notices and reports
				return
			}
			continue // more may have been queued meanwhile
		}
		if closing {
			if tc, ok := c.nc.(interface{ CloseWrite() error }); ok {
				tc.CloseWrite()
			} else {
				c.nc.Close()
			}
			return
		}
	}
}

func (c *serverConn) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// dispatch carries out the Machine's actions. s.mu must be held.
func (s *Server) dispatch(actions []Action) {
	for _, a := range actions {
		switch a := a.(type) {
		case Send:
			if c := s.conns[a.Conn]; c != nil {
				c.mu.Lock()
				c.queue = append(c.queue, a.Frame)
				c.mu.Unlock()
				c.wake()
			}
		case CloseConn:
			if c := s.conns[a.Conn]; c != nil {
				c.mu.Lock()
				c.closing = true
				c.mu.Unlock()
				c.nc.SetReadDeadline(time.Now().Add(lingerTimeout))
				c.wake()
				s.log.Debug("closing connection", "remote", c.remote, "reason", a.Reason)
			}
		case Report:
			s.logEvent(a.Event)
			s.emit(a.Event)
		}
	}
}

func (s *Server) logEvent(ev Event) {
	switch ev := ev.(type) {
	case Connected:
		s.log.Debug("rank connected", "ranks", ev.Ranks, "remote", ev.Remote)
	case Refused:
		s.log.Info("connection refused", "remote", ev.Remote, "reason", ev.Reason)
	case FenceDone:
		s.log.Debug("fence done", "epoch", ev.Epoch, "keys", ev.Keys, "bytes", ev.Bytes)
	case Abort:
		s.log.Info("job aborted", "rank", ev.Rank, "code", ev.Code, "message", ev.Message)
	case Finalized:
		s.log.Debug("rank finalized", "rank", ev.Rank)
	case AllFinalized:
		s.log.Debug("all ranks finalized")
	case Lost:
		s.log.Info("rank lost", "rank", ev.Rank, "err", ev.Err)
	case ProtocolError:
		s.log.Warn("protocol error", "remote", ev.Remote, "ranks", ev.Ranks, "err", ev.Err)
	}
}

// emit queues ev for the owner without blocking.
func (s *Server) emit(ev Event) {
	s.evMu.Lock()
	s.evQueue = append(s.evQueue, ev)
	s.evMu.Unlock()
	select {
	case s.evKick <- struct{}{}:
	default:
	}
}

// forwardEvents moves queued events to the Events channel, in order, until
// Close; it then delivers what fits in the channel's buffer and closes it.
func (s *Server) forwardEvents() {
	defer close(s.evDone)
	defer close(s.events)
	for {
		s.evMu.Lock()
		q := s.evQueue
		s.evQueue = nil
		s.evMu.Unlock()
		for i, ev := range q {
			select {
			case s.events <- ev:
			case <-s.quit:
				s.flushEvents(q[i:])
				return
			}
		}
		select {
		case <-s.evKick:
		case <-s.quit:
			s.evMu.Lock()
			q = s.evQueue
			s.evQueue = nil
			s.evMu.Unlock()
			s.flushEvents(q)
			return
		}
	}
}

// flushEvents delivers what fits in the Events channel without blocking.
func (s *Server) flushEvents(q []Event) {
	for i, ev := range q {
		select {
		case s.events <- ev:
		default:
			s.log.Warn("events dropped at close: the owner is not reading Events", "dropped", len(q)-i)
			return
		}
	}
}
