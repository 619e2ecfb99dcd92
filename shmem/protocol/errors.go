package protocol

import (
	"errors"
	"fmt"
)

// Errors a Step can return, wrapped in an *Error that names the rank and
// the call. The first group are mistakes of the rank's program (the call
// changed nothing and may be reported to it); the others mean the engine or
// a peer broke the protocol, and the job should stop.
var (
	ErrLockHeld    = errors.New("lock already held (or being acquired) by this rank")
	ErrLockNotHeld = errors.New("lock not held by this rank")
	ErrBarrierInCS = errors.New("barrier while holding or acquiring a lock")
	ErrBusy        = errors.New("a barrier of this rank is still in progress")
	ErrBadID       = errors.New("negative lock or condition variable number")
	ErrNoRegion    = errors.New("page outside every allocated region")
	ErrPlacement   = errors.New("bad placement")
	ErrOverlap     = errors.New("region overlaps an allocated region")

	ErrProtocol = errors.New("protocol violation")
)

// Error is the error of one call of Step.
type Error struct {
	Rank int    // the rank whose Machine failed
	Call string // the event, e.g. "Unlock(7)" or "Recv(Grant 2→3 …)"
	Err  error  // what went wrong; errors.Is works with the Err* values
}

func (e *Error) Error() string { return fmt.Sprintf("shmem: rank %d: %s: %v", e.Rank, e.Call, e.Err) }

// Unwrap returns e.Err.
func (e *Error) Unwrap() error { return e.Err }

// protoErr returns an ErrProtocol error with detail.
func protoErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, args...))
}
