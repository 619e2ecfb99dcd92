package provider

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jiarun/jia/rdmaio"
)

var states = []rdmaio.QPState{rdmaio.StateReset, rdmaio.StateInit, rdmaio.StateRTR, rdmaio.StateRTS, rdmaio.StateErr}

// legal is the verbs QP state diagram as this package implements it.
func legal(from, to rdmaio.QPState) bool {
	switch to {
	case rdmaio.StateReset, rdmaio.StateErr:
		return true
	case rdmaio.StateInit:
		return from == rdmaio.StateReset || from == rdmaio.StateInit
	case rdmaio.StateRTR:
		return from == rdmaio.StateInit
	case rdmaio.StateRTS:
		return from == rdmaio.StateRTR || from == rdmaio.StateRTS
	}
	return false
}

// TestTransitionMatrix: every (from, to) pair of both QP types is accepted
// exactly when the verbs state diagram has the edge.
func TestTransitionMatrix(t *testing.T) {
	for _, typ := range []rdmaio.QPType{rdmaio.RC, rdmaio.UD} {
		for _, from := range states {
			for _, to := range states {
				a := rdmaio.QPAttr{State: to, Dest: rdmaio.AHAttr{Addr: []byte{1}}, DestQPN: 7}
				err := CheckTransition(typ, from, &a)
				if legal(from, to) != (err == nil) {
					t.Errorf("%v %v → %v: err %v, legal %v", typ, from, to, err, legal(from, to))
				}
				if err != nil && !errors.Is(err, rdmaio.ErrInvalidTransition) {
					t.Errorf("%v %v → %v: error %v does not wrap ErrInvalidTransition", typ, from, to, err)
				}
			}
		}
	}
}

// TestTransitionAttributes: INIT → RTR of an RC QP needs the destination;
// RTS checks the retry counts; QP access holds only remote rights.
func TestTransitionAttributes(t *testing.T) {
	dest := rdmaio.AHAttr{Addr: []byte("peer")}
	cases := []struct {
		typ  rdmaio.QPType
		from rdmaio.QPState
		attr rdmaio.QPAttr
		want error
	}{
		{rdmaio.RC, rdmaio.StateInit, rdmaio.QPAttr{State: rdmaio.StateRTR, DestQPN: 3}, rdmaio.ErrInvalidArgument},
		{rdmaio.RC, rdmaio.StateInit, rdmaio.QPAttr{State: rdmaio.StateRTR, Dest: dest}, rdmaio.ErrInvalidArgument},
		{rdmaio.RC, rdmaio.StateInit, rdmaio.QPAttr{State: rdmaio.StateRTR, Dest: dest, DestQPN: 3, MinRNRTimer: -time.Second}, rdmaio.ErrInvalidArgument},
		{rdmaio.RC, rdmaio.StateInit, rdmaio.QPAttr{State: rdmaio.StateRTR, Dest: dest, DestQPN: 3}, nil},
		{rdmaio.UD, rdmaio.StateInit, rdmaio.QPAttr{State: rdmaio.StateRTR}, nil},
		{rdmaio.RC, rdmaio.StateRTR, rdmaio.QPAttr{State: rdmaio.StateRTS, RNRRetry: 8}, rdmaio.ErrInvalidArgument},
		{rdmaio.RC, rdmaio.StateRTR, rdmaio.QPAttr{State: rdmaio.StateRTS, RNRRetry: -1}, rdmaio.ErrInvalidArgument},
		{rdmaio.RC, rdmaio.StateRTR, rdmaio.QPAttr{State: rdmaio.StateRTS, RetryCount: 8}, rdmaio.ErrInvalidArgument},
		{rdmaio.RC, rdmaio.StateRTR, rdmaio.QPAttr{State: rdmaio.StateRTS, Timeout: -1}, rdmaio.ErrInvalidArgument},
		{rdmaio.RC, rdmaio.StateRTR, rdmaio.QPAttr{State: rdmaio.StateRTS, RNRRetry: rdmaio.RNRRetryInfinite, RetryCount: 7}, nil},
		{rdmaio.RC, rdmaio.StateReset, rdmaio.QPAttr{State: rdmaio.StateInit, Access: rdmaio.AccessLocalWrite}, rdmaio.ErrInvalidArgument},
		{rdmaio.RC, rdmaio.StateReset, rdmaio.QPAttr{State: rdmaio.StateInit, Access: rdmaio.AccessRemote}, nil},
		{rdmaio.UD, rdmaio.StateReset, rdmaio.QPAttr{State: rdmaio.StateInit, QKey: 0x11}, nil},
		{rdmaio.RC, rdmaio.StateRTS, rdmaio.QPAttr{State: rdmaio.QPState(42)}, rdmaio.ErrInvalidTransition},
		{rdmaio.QPType(3), rdmaio.StateReset, rdmaio.QPAttr{State: rdmaio.StateInit}, rdmaio.ErrInvalidArgument},
	}
	for _, c := range cases {
		err := CheckTransition(c.typ, c.from, &c.attr)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%v %v → %+v: %v, want %v", c.typ, c.from, c.attr, err, c.want)
		}
	}
}

// TestPostRules: sends need RTS (ERR accepts and flushes); receives need
// INIT or later.
func TestPostRules(t *testing.T) {
	for _, s := range states {
		send := s == rdmaio.StateRTS || s == rdmaio.StateErr
		recv := s != rdmaio.StateReset
		if (CanPostSend(s) == nil) != send || (CanPostRecv(s) == nil) != recv {
			t.Errorf("%v: post send %v (want %v), post recv %v (want %v)", s, CanPostSend(s), send, CanPostRecv(s), recv)
		}
		if err := CanPostSend(s); err != nil && !errors.Is(err, rdmaio.ErrInvalidState) {
			t.Errorf("%v: %v does not wrap ErrInvalidState", s, err)
		}
		if Receives(s) != (s == rdmaio.StateRTR || s == rdmaio.StateRTS) {
			t.Errorf("Receives(%v) = %v", s, Receives(s))
		}
	}
}

func ExampleCheckTransition() {
	err := CheckTransition(rdmaio.RC, rdmaio.StateInit, &rdmaio.QPAttr{State: rdmaio.StateRTS})
	fmt.Println(err)
	// Output: rdmaio: invalid QP state transition: INIT → RTS
}
