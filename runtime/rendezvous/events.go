package rendezvous

import (
	"errors"
	"fmt"
)

// Event is something the rendezvous reports to its owner, the launcher:
// the Machine returns events in Report actions and the Server delivers them
// on its Events channel, in the order they happened. The concrete types are
// Connected, Refused, FenceDone, Abort, Finalized, AllFinalized, Lost and
// ProtocolError. Events are values; slices in them must not be modified.
type Event interface {
	fmt.Stringer
	isEvent()
}

// Connected reports a connection that passed the handshake and now speaks
// for Ranks (one rank today; several for a per-host proxy).
type Connected struct {
	Ranks  []int
	Remote string // the peer's address
}

// Refused reports a connection turned away before it was authenticated:
// wrong job secret, wrong job ID, a rank out of range or already connected,
// a malformed hello, a handshake that did not finish in time, or a job that
// has already ended. Unless the peer had already gone (or went silent), it
// was sent Reason before the server closed the connection.
type Refused struct {
	Remote string
	Reason string
}

// FenceDone reports that every rank joined the fence of Epoch (epochs count
// from 0) and that the Keys pairs put in that epoch, Bytes bytes of keys and
// values, were sent to every rank.
type FenceDone struct {
	Epoch int
	Keys  int
	Bytes int
}

// Abort reports that Rank aborted the job with exit code Code. The server has
// told every connected rank and closed every connection; the launcher should
// stop the job's processes and exit with Code.
type Abort struct {
	Rank    int
	Code    int
	Message string
}

// Finalized reports that Rank finished cleanly.
type Finalized struct {
	Rank int
}

// AllFinalized reports that every rank of the job has finalized. It comes
// once, after the last Finalized.
type AllFinalized struct{}

// Lost reports that Rank's connection ended before the rank finalized (the
// process died, closed the connection, or broke the protocol). A lost rank
// fails the job: the server closes every other connection, giving the reason,
// and refuses new ones.
type Lost struct {
	Rank int
	Err  error
}

// ProtocolError reports that an authenticated connection, speaking for
// Ranks, broke a protocol rule; the server sent it the error and closed it.
// Ranks that had not finalized are then reported Lost.
type ProtocolError struct {
	Remote string
	Ranks  []int
	Err    error
}

func (Connected) isEvent()     {}
func (Refused) isEvent()       {}
func (FenceDone) isEvent()     {}
func (Abort) isEvent()         {}
func (Finalized) isEvent()     {}
func (AllFinalized) isEvent()  {}
func (Lost) isEvent()          {}
func (ProtocolError) isEvent() {}

func (e Connected) String() string {
	return fmt.Sprintf("connected ranks %v from %s", e.Ranks, e.Remote)
}

func (e Refused) String() string {
	return fmt.Sprintf("refused %s: %s", e.Remote, e.Reason)
}

func (e FenceDone) String() string {
	return fmt.Sprintf("fence of epoch %d done: %d keys, %d bytes", e.Epoch, e.Keys, e.Bytes)
}

func (e Abort) String() string {
	return fmt.Sprintf("rank %d aborted the job (code %d): %s", e.Rank, e.Code, e.Message)
}

func (e Finalized) String() string { return fmt.Sprintf("rank %d finalized", e.Rank) }

func (AllFinalized) String() string { return "all ranks finalized" }

func (e Lost) String() string { return fmt.Sprintf("rank %d lost: %v", e.Rank, e.Err) }

func (e ProtocolError) String() string {
	return fmt.Sprintf("protocol error from %s (ranks %v): %v", e.Remote, e.Ranks, e.Err)
}

// Errors a Client returns, to be matched with errors.Is and errors.As.
var (
	// ErrRefused is wrapped by Dial's error when the server refused the
	// connection; the message carries the server's reason.
	ErrRefused = errors.New("refused")

	// ErrClosed is wrapped by the errors of a Client that was closed,
	// finalized or aborted by its own rank.
	ErrClosed = errors.New("client closed")

	// ErrServerClosed is wrapped by Client.Err when the server closed the
	// connection and said why (the job failed, or the launcher shut down).
	ErrServerClosed = errors.New("closed by server")
)

// AbortError is Client.Err after a rank (this one or another) aborted the
// job.
type AbortError struct {
	Rank    int
	Code    int
	Message string
}

func (e *AbortError) Error() string {
	return fmt.Sprintf("job aborted by rank %d (code %d): %s", e.Rank, e.Code, e.Message)
}
