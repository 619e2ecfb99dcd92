// Package peerauth is the handshake that opens every connection between two
// ranks of a job (the runtime's byte path, the DSM pagers' links): the
// dialler names its protocol; the acceptor sends its protocol name and a
// fresh nonce; the dialler answers
// with its rank, the rank it wants, and HMAC-SHA256(secret, name ‖ nonce ‖
// job ‖ from ‖ to); the acceptor checks it and answers one byte, 0 for
// welcome. The job secret never crosses the wire, a connection from another
// job or without the secret is refused, and a recorded answer is useless
// against another nonce.
//
// The dialler speaks first so that a lost final ACK of TCP's handshake is
// repaired by the dialler's retransmission (a fraction of a second) rather
// than by the acceptor's SYN-ACK timer (seconds), and a connection attempt
// whose SYN goes unanswered is retried afresh (see Dial).
package peerauth

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// NonceLen is the length of the acceptor's challenge.
const NonceLen = 16

// ErrAuth is the error of a handshake whose proof was refused.
var ErrAuth = errors.New("refused: authentication failed")

// Params are what both ends must agree on.
type Params struct {
	// Proto names the protocol (and its version); a peer speaking another
	// is refused. Example: "JIAP1".
	Proto  string
	Secret []byte
	Job    string
	// Timeout bounds the whole handshake.
	Timeout time.Duration
}

func (p Params) mac(nonce []byte, from, to int) []byte {
	m := hmac.New(sha256.New, p.Secret)
	m.Write([]byte(p.Proto))
	m.Write(nonce)
	m.Write([]byte(p.Job))
	var b [8]byte
	binary.BigEndian.PutUint32(b[:4], uint32(from))
	binary.BigEndian.PutUint32(b[4:], uint32(to))
	m.Write(b[:])
	return m.Sum(nil)
}

// Accept runs the acceptor's side on c for rank self of a job of size
// ranks. It returns the dialler's rank and a reader (of bufSize bytes) for
// what follows the handshake.
func Accept(c net.Conn, p Params, self, size, bufSize int) (int, *bufio.Reader, error) {
	c.SetDeadline(time.Now().Add(p.Timeout))
	defer c.SetDeadline(time.Time{})
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	r := bufio.NewReaderSize(c, bufSize)
	claim := make([]byte, len(p.Proto))
	if _, err := io.ReadFull(r, claim); err != nil {
		return 0, nil, fmt.Errorf("read protocol: %w", err)
	}
	nonce := make([]byte, NonceLen)
	if _, err := rand.Read(nonce); err != nil {
		return 0, nil, err
	}
	// The challenge goes out even to a dialler of another protocol, which
	// then names what it found.
	if _, err := c.Write(append([]byte(p.Proto), nonce...)); err != nil {
		return 0, nil, err
	}
	if string(claim) != p.Proto {
		return 0, nil, fmt.Errorf("dialler speaks %q, not %q: %w", claim, p.Proto, ErrAuth)
	}
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, fmt.Errorf("read hello: %w", err)
	}
	from := int(binary.BigEndian.Uint32(hdr[:4]))
	to := int(binary.BigEndian.Uint32(hdr[4:]))
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(r, got); err != nil {
		return 0, nil, fmt.Errorf("read hello: %w", err)
	}
	if to != self || from < 0 || from >= size || !hmac.Equal(got, p.mac(nonce, from, to)) {
		c.Write([]byte{1})
		return 0, nil, fmt.Errorf("claimed rank %d → %d: %w", from, to, ErrAuth)
	}
	if _, err := c.Write([]byte{0}); err != nil {
		return 0, nil, err
	}
	return from, r, nil
}

// Dial connects to addr and proves that it is rank self of the job,
// wanting rank to. what names the peer in errors ("a jia rank").
//
// A connection attempt that is not answered within connectAttempt (a lost
// SYN or SYN-ACK, which TCP retries only after 1, 3 and 7 s) is abandoned
// for a fresh one, until p.Timeout has passed since the call.
func Dial(addr string, p Params, self, to int, what string) (net.Conn, error) {
	deadline := time.Now().Add(p.Timeout)
	c, err := connect(addr, deadline)
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	c.SetDeadline(deadline)
	fail := func(err error) (net.Conn, error) {
		c.Close()
		return nil, err
	}
	if _, err := c.Write([]byte(p.Proto)); err != nil {
		return fail(fmt.Errorf("send protocol: %w", err))
	}
	buf := make([]byte, len(p.Proto)+NonceLen)
	if _, err := io.ReadFull(c, buf); err != nil {
		return fail(fmt.Errorf("read challenge: %w", err))
	}
	if string(buf[:len(p.Proto)]) != p.Proto {
		return fail(fmt.Errorf("%s is not %s", addr, what))
	}
	hello := make([]byte, 8, 8+sha256.Size)
	binary.BigEndian.PutUint32(hello[:4], uint32(self))
	binary.BigEndian.PutUint32(hello[4:], uint32(to))
	hello = append(hello, p.mac(buf[len(p.Proto):], self, to)...)
	if _, err := c.Write(hello); err != nil {
		return fail(err)
	}
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		return fail(err)
	}
	if ack[0] != 0 {
		return fail(ErrAuth)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// connectAttempt bounds one TCP connection attempt within Dial.
const connectAttempt = 3 * time.Second

// connect opens a TCP connection to addr by deadline, starting a fresh
// attempt whenever one times out.
func connect(addr string, deadline time.Time) (net.Conn, error) {
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return nil, fmt.Errorf("dial tcp %s: %w", addr, os.ErrDeadlineExceeded)
		}
		c, err := net.DialTimeout("tcp", addr, min(left, connectAttempt))
		var ne net.Error
		if err == nil || !errors.As(err, &ne) || !ne.Timeout() || time.Until(deadline) <= 0 {
			return c, err
		}
	}
}
