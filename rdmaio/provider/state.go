package provider

import (
	"fmt"

	"github.com/jiarun/jia/rdmaio"
)

// CheckTransition checks a QP modification against the verbs state machine:
//
//	RESET → INIT → RTR → RTS, INIT → INIT, RTS → RTS, any → RESET, any → ERR
//
// and the attributes each transition needs (see rdmaio.QPAttr). It does not
// change anything; the provider applies the transition when it returns nil.
func CheckTransition(t rdmaio.QPType, cur rdmaio.QPState, attr *rdmaio.QPAttr) error {
	if t != rdmaio.RC && t != rdmaio.UD {
		return fmt.Errorf("%w: QP type %v", rdmaio.ErrInvalidArgument, t)
	}
	to := attr.State
	switch to {
	case rdmaio.StateReset, rdmaio.StateErr:
		return nil
	case rdmaio.StateInit, rdmaio.StateRTR, rdmaio.StateRTS:
	default:
		return fmt.Errorf("%w: %v → %v: unknown target state", rdmaio.ErrInvalidTransition, cur, to)
	}
	legal := false
	switch cur {
	case rdmaio.StateReset:
		legal = to == rdmaio.StateInit
	case rdmaio.StateInit:
		legal = to == rdmaio.StateInit || to == rdmaio.StateRTR
	case rdmaio.StateRTR:
		legal = to == rdmaio.StateRTS
	case rdmaio.StateRTS:
		legal = to == rdmaio.StateRTS
	}
	if !legal {
		return fmt.Errorf("%w: %v → %v", rdmaio.ErrInvalidTransition, cur, to)
	}
	switch to {
	case rdmaio.StateInit:
		if t == rdmaio.RC && attr.Access&^rdmaio.AccessRemote != 0 {
			return fmt.Errorf("%w: %v → INIT: QP access %v: only remote rights apply to a QP", rdmaio.ErrInvalidArgument, cur, attr.Access)
		}
	case rdmaio.StateRTR:
		if t == rdmaio.RC {
			if len(attr.Dest.Addr) == 0 {
				return fmt.Errorf("%w: INIT → RTR of an RC QP needs Dest (the peer's address)", rdmaio.ErrInvalidArgument)
			}
			if attr.DestQPN == 0 {
				return fmt.Errorf("%w: INIT → RTR of an RC QP needs DestQPN", rdmaio.ErrInvalidArgument)
			}
			if attr.MinRNRTimer < 0 {
				return fmt.Errorf("%w: MinRNRTimer %v", rdmaio.ErrInvalidArgument, attr.MinRNRTimer)
			}
		}
	case rdmaio.StateRTS:
		if t == rdmaio.RC && cur == rdmaio.StateRTR {
			if attr.RNRRetry < 0 || attr.RNRRetry > rdmaio.RNRRetryInfinite {
				return fmt.Errorf("%w: RNRRetry %d (want 0..%d)", rdmaio.ErrInvalidArgument, attr.RNRRetry, rdmaio.RNRRetryInfinite)
			}
			if attr.RetryCount < 0 || attr.RetryCount > 7 {
				return fmt.Errorf("%w: RetryCount %d (want 0..7)", rdmaio.ErrInvalidArgument, attr.RetryCount)
			}
			if attr.Timeout < 0 {
				return fmt.Errorf("%w: Timeout %v", rdmaio.ErrInvalidArgument, attr.Timeout)
			}
		}
	}
	return nil
}

// CanPostSend reports whether send work requests may be posted in state s:
// in RTS they execute, in ERR they are accepted and complete with
// StatusWRFlushErr. Other states refuse with ErrInvalidState.
func CanPostSend(s rdmaio.QPState) error {
	if s == rdmaio.StateRTS || s == rdmaio.StateErr {
		return nil
	}
	return fmt.Errorf("%w: post send in %v (needs RTS)", rdmaio.ErrInvalidState, s)
}

// CanPostRecv reports whether receive work requests may be posted in state
// s: every state but RESET (in ERR they complete with StatusWRFlushErr).
func CanPostRecv(s rdmaio.QPState) error {
	if s == rdmaio.StateReset {
		return fmt.Errorf("%w: post receive in RESET (needs INIT or later)", rdmaio.ErrInvalidState)
	}
	return nil
}

// Receives reports whether a QP in state s delivers incoming messages.
func Receives(s rdmaio.QPState) bool { return s == rdmaio.StateRTR || s == rdmaio.StateRTS }
