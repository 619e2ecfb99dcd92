package comm

import (
	"slices"
	"testing"
	"time"

	"github.com/jiarun/jia/comm/transport"
)

// napRecorder is a transport whose Wait only records its bound.
type napRecorder struct {
	transport.Transport
	naps []time.Duration
}

func (r *napRecorder) Wait(d time.Duration) { r.naps = append(r.naps, d) }

// TestLongWaitsSleepLonger: after spinning and yielding, a waiting call
// blocks in the transport, first for Options.Sleep, then for twice as
// long each time, up to maxNap; a new wait starts over.
func TestLongWaitsSleepLonger(t *testing.T) {
	r := &napRecorder{}
	p := &proc{tr: r, opt: Options{Spin: 1, Yield: time.Nanosecond, Sleep: time.Millisecond}}
	var b backoff
	for len(r.naps) < 9 {
		p.idle(&b)
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 64, 64}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if !slices.Equal(r.naps, want) {
		t.Fatalf("blocks of a long wait: %v, want %v", r.naps, want)
	}
	r.naps = r.naps[:0]
	b = backoff{}
	for len(r.naps) < 1 {
		p.idle(&b)
	}
	if r.naps[0] != time.Millisecond {
		t.Fatalf("a new wait blocks first for %v, want %v", r.naps[0], time.Millisecond)
	}
}

// TestWaitPastSpinYields: a wait that starts with its spinning spent
// already (rounds a blocking receive spent watching one rank) still yields
// for Options.Yield before it blocks in the transport.
func TestWaitPastSpinYields(t *testing.T) {
	r := &napRecorder{}
	p := &proc{tr: r, opt: Options{Spin: 10, Yield: time.Hour, Sleep: time.Millisecond}}
	for _, start := range []int{1, 10, 11, 500} {
		b := backoff{n: start}
		for range 100 {
			p.idle(&b)
		}
		if len(r.naps) != 0 || b.t0.IsZero() {
			t.Fatalf("wait starting at round %d: blocked %d times within 100 rounds (yielding since %v); want only yields for an hour", start, len(r.naps), b.t0)
		}
	}
}
