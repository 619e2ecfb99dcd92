package rendezvous

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

const testJob = "job-42"

var (
	testSecret  = bytes.Repeat([]byte{0x5e}, SecretLen)
	otherSecret = bytes.Repeat([]byte{0x0b}, SecretLen)
)

// A step feeds one input to the Machine and lists the actions it must
// return, rendered by render. An expected line ending in "..." matches any
// line with that prefix. No lines means no actions.
type step struct {
	in   Input
	want []string
}

// script flattens steps and slices of steps into one script.
func script(parts ...any) []step {
	var out []step
	for _, p := range parts {
		switch p := p.(type) {
		case step:
			out = append(out, p)
		case []step:
			out = append(out, p...)
		default:
			panic(fmt.Sprintf("script: %T", p))
		}
	}
	return out
}

func nonceFor(c ConnID) (n [NonceLen]byte) {
	for i := range n {
		n[i] = byte(c) + byte(i)
	}
	return n
}

func remote(c ConnID) string { return fmt.Sprintf("peer%d", c) }

func open(c ConnID, want ...string) step {
	if want == nil {
		want = []string{fmt.Sprintf("send %d challenge v1", c)}
	}
	return step{in: Opened{Conn: c, Remote: remote(c), Nonce: nonceFor(c)}, want: want}
}

func recv(c ConnID, m message, want ...string) step {
	return step{in: Received{Conn: c, Body: encodeFrame(m)[4:]}, want: want}
}

func recvRaw(c ConnID, body []byte, want ...string) step {
	return step{in: Received{Conn: c, Body: body}, want: want}
}

func closed(c ConnID, err error, want ...string) step {
	return step{in: Closed{Conn: c, Err: err}, want: want}
}

func shutdown(reason string, want ...string) step {
	return step{in: Shutdown{Reason: reason}, want: want}
}

// hello returns a correct hello of conn c for ranks.
func hello(c ConnID, ranks ...int) *helloMsg {
	return helloWith(c, testJob, testSecret, ranks...)
}

func helloWith(c ConnID, job string, secret []byte, ranks ...int) *helloMsg {
	if ranks == nil {
		ranks = []int{}
	}
	return &helloMsg{version: Version, job: job, ranks: ranks, mac: helloMAC(secret, nonceFor(c), job, ranks)}
}

// connect opens conn c and authenticates it for ranks.
func connect(c ConnID, ranks ...int) []step {
	return []step{
		open(c),
		recv(c, hello(c, ranks...),
			fmt.Sprintf("send %d welcome ...", c),
			fmt.Sprintf("report connected ranks %v from %s", ranks, remote(c))),
	}
}

func put(rank int, key, value string) *putMsg {
	return &putMsg{rank: rank, key: key, value: []byte(value)}
}
func fence(rank int) *fenceMsg       { return &fenceMsg{rank: rank} }
func finalize(rank int) *finalizeMsg { return &finalizeMsg{rank: rank} }
func abort(rank, code int, text string) *abortMsg {
	return &abortMsg{rank: rank, code: int32(code), text: text}
}

// refused lists the actions that refuse conn c for reason.
func refused(c ConnID, reason string) []string {
	return []string{
		fmt.Sprintf("send %d refused %q", c, reason),
		fmt.Sprintf("close %d: refused: %s", c, reason),
		fmt.Sprintf("report refused %s: %s", remote(c), reason),
	}
}

// protoErr lists the actions that close authenticated conn c, speaking for
// ranks, for a protocol error.
func protoErr(c ConnID, ranks []int, msg string) []string {
	return []string{
		fmt.Sprintf("send %d closing %q", c, "protocol error: "+msg),
		fmt.Sprintf("close %d: protocol error: %s", c, msg),
		fmt.Sprintf("report protocol error from %s (ranks %v): %s", remote(c), ranks, msg),
	}
}

// failed lists the actions that end the job because rank was lost for msg:
// the report, then the closing of each conn in others.
func failed(rank int, msg string, others ...ConnID) []string {
	out := []string{fmt.Sprintf("report rank %d lost: %s", rank, msg)}
	reason := fmt.Sprintf("job failed: rank %d lost: %s", rank, msg)
	for _, c := range others {
		out = append(out, fmt.Sprintf("send %d closing %q", c, reason), fmt.Sprintf("close %d: %s", c, reason))
	}
	return out
}

func lines(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// render describes an action in one line.
func render(a Action) string {
	switch a := a.(type) {
	case Send:
		body := a.Frame[4:]
		if n := int(a.Frame[0])<<24 | int(a.Frame[1])<<16 | int(a.Frame[2])<<8 | int(a.Frame[3]); n != len(body) {
			return fmt.Sprintf("send %d: bad length prefix %d for %d bytes", a.Conn, n, len(body))
		}
		m, err := decodeMessage(body)
		if err != nil {
			return fmt.Sprintf("send %d: undecodable frame: %v", a.Conn, err)
		}
		return fmt.Sprintf("send %d %s", a.Conn, describe(m))
	case CloseConn:
		return fmt.Sprintf("close %d: %s", a.Conn, a.Reason)
	case Report:
		return "report " + a.Event.String()
	}
	return fmt.Sprintf("%T", a)
}

func match(want, got string) bool {
	if p, ok := strings.CutSuffix(want, "..."); ok {
		return strings.HasPrefix(got, p)
	}
	return want == got
}

// run plays a script on a new Machine of the given size.
func run(t *testing.T, size int, steps []step, tweak ...func(*Machine)) *Machine {
	t.Helper()
	m, err := NewMachine(MachineConfig{Size: size, Job: testJob, Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tweak {
		f(m)
	}
	for i, s := range steps {
		var got []string
		for _, a := range m.Step(s.in) {
			got = append(got, render(a))
		}
		ok := len(got) == len(s.want)
		for j := 0; ok && j < len(got); j++ {
			ok = match(s.want[j], got[j])
		}
		if !ok {
			t.Fatalf("step %d (%s): actions\n\t%s\nwant\n\t%s", i, describeInput(s.in),
				strings.Join(got, "\n\t"), strings.Join(s.want, "\n\t"))
		}
	}
	return m
}

func describeInput(in Input) string {
	switch in := in.(type) {
	case Opened:
		return fmt.Sprintf("open %d", in.Conn)
	case Received:
		if m, err := decodeMessage(in.Body); err == nil {
			return fmt.Sprintf("recv %d %s", in.Conn, describe(m))
		}
		return fmt.Sprintf("recv %d raw %x", in.Conn, in.Body)
	case Malformed:
		return fmt.Sprintf("malformed %d: %v", in.Conn, in.Err)
	case Closed:
		return fmt.Sprintf("closed %d: %v", in.Conn, in.Err)
	case Shutdown:
		return "shutdown: " + in.Reason
	}
	return fmt.Sprintf("%T", in)
}

// TestMachineRules checks each protocol rule of the Machine, one script per
// rule, named after it.
func TestMachineRules(t *testing.T) {
	tests := []struct {
		rule  string
		size  int
		steps []step
		tweak func(*Machine)
	}{
		// ---- handshake ----
		{
			rule: "HelloWithJobSecretIsWelcomed",
			size: 2,
			steps: script(
				open(1),
				recv(1, hello(1, 1), "send 1 welcome size=2 epoch=0", "report connected ranks [1] from peer1"),
			),
		},
		{
			rule:  "WrongJobSecretIsRefused",
			size:  2,
			steps: script(open(1), recv(1, helloWith(1, testJob, otherSecret, 0), refused(1, "authentication failed (wrong job secret)")...)),
		},
		{
			rule: "MACMustMatchThisConnectionsNonce",
			size: 2,
			// A hello replayed from another connection carries the MAC of
			// that connection's nonce.
			steps: script(open(1), open(2), recv(2, hello(1, 0), refused(2, "authentication failed (wrong job secret)")...)),
		},
		{
			rule: "MACCoversTheRanks",
			size: 2,
			steps: script(open(1), recv(1, func() *helloMsg {
				h := hello(1, 0)
				h.ranks = []int{1}
				return h
			}(), refused(1, "authentication failed (wrong job secret)")...)),
		},
		{
			rule:  "WrongJobIDIsRefused",
			size:  2,
			steps: script(open(1), recv(1, helloWith(1, "job-41", testSecret, 0), refused(1, `authentication failed (wrong job ID "job-41")`)...)),
		},
		{
			rule: "UnknownProtocolVersionIsRefused",
			size: 2,
			steps: script(open(1), recv(1, func() *helloMsg {
				h := hello(1, 0)
				h.version = 2
				return h
			}(), refused(1, "unsupported protocol version 2 (server speaks 1)")...)),
		},
		{
			rule:  "RankOutOfRangeIsRefused",
			size:  2,
			steps: script(open(1), recv(1, hello(1, 2), refused(1, "rank 2 out of range [0, 2)")...)),
		},
		{
			rule:  "HelloWithoutRanksIsRefused",
			size:  2,
			steps: script(open(1), recv(1, hello(1), refused(1, "hello names no rank")...)),
		},
		{
			rule:  "RankNamedTwiceInHelloIsRefused",
			size:  2,
			steps: script(open(1), recv(1, hello(1, 1, 1), refused(1, "rank 1 named twice in the hello")...)),
		},
		{
			rule: "DuplicateHelloForRankIsRefusedAndFirstConnectionStays",
			size: 2,
			steps: script(
				connect(1, 0),
				open(2),
				recv(2, hello(2, 0), refused(2, "rank 0 already connected")...),
				recv(1, finalize(0), "send 1 finalized rank=0", "report rank 0 finalized"),
			),
		},
		{
			rule: "HelloForFinalizedRankIsRefused",
			size: 2,
			steps: script(
				connect(1, 0),
				recv(1, finalize(0), "send 1 finalized rank=0", "report rank 0 finalized"),
				open(2),
				recv(2, hello(2, 0), refused(2, "rank 0 already finalized")...),
			),
		},
		{
			rule:  "FrameBeforeHelloIsRefused",
			size:  2,
			steps: script(open(1), recv(1, put(0, "k", "v"), refused(1, "protocol error: expected hello, got put frame")...)),
		},
		{
			rule: "MalformedHelloIsRefused",
			size: 2,
			steps: script(open(1), recvRaw(1, []byte{typeHello, 0, 0, 0},
				refused(1, "bad hello: malformed frame: hello frame: truncated: need 4 bytes, have 3")...)),
		},
		{
			rule: "ConnectionEndingDuringHandshakeIsReportedRefused",
			size: 2,
			steps: script(
				open(1),
				closed(1, errors.New("handshake not completed within 10s"),
					"report refused peer1: connection ended during the handshake: handshake not completed within 10s"),
			),
		},
		{
			rule: "ProxyHelloSpeaksForSeveralRanks",
			size: 3,
			steps: script(
				connect(1, 0, 2),
				connect(2, 1),
				recv(1, put(2, "card/2", "c2")),
				recv(1, put(0, "card/0", "c0")),
				recv(2, put(1, "card/1", "c1")),
				recv(1, fence(0)),
				recv(2, fence(1)),
				recv(1, fence(2),
					`send 1 fence-result epoch=0 {card/0="c0" card/1="c1" card/2="c2"}`,
					`send 2 fence-result epoch=0 {card/0="c0" card/1="c1" card/2="c2"}`,
					"report fence of epoch 0 done: 3 keys, 48 bytes"),
				recv(1, finalize(2), "send 1 finalized rank=2", "report rank 2 finalized"),
			),
		},
		{
			rule: "ConnectionMaySpeakOnlyForItsRanks",
			size: 2,
			steps: script(
				connect(1, 0),
				connect(2, 1),
				recv(1, put(1, "k", "v"), lines(
					protoErr(1, []int{0}, "put for rank 1, which this connection does not speak for"),
					failed(0, "put for rank 1, which this connection does not speak for", 2))...),
			),
		},
		{
			rule: "SecondHelloIsProtocolError",
			size: 1,
			steps: script(
				connect(1, 0),
				recv(1, hello(1, 0), lines(
					protoErr(1, []int{0}, "second hello on an authenticated connection"),
					failed(0, "second hello on an authenticated connection"))...),
			),
		},
		{
			rule: "ServerFrameFromClientIsProtocolError",
			size: 1,
			steps: script(
				connect(1, 0),
				recv(1, &welcomeMsg{size: 1}, lines(
					protoErr(1, []int{0}, "unexpected welcome frame from a client"),
					failed(0, "unexpected welcome frame from a client"))...),
			),
		},
		{
			rule: "MalformedFrameIsProtocolError",
			size: 1,
			steps: script(
				connect(1, 0),
				recvRaw(1, []byte{typeFence, 0, 0}, lines(
					protoErr(1, []int{0}, "malformed frame: fence frame: truncated: need 4 bytes, have 2"),
					failed(0, "malformed frame: fence frame: truncated: need 4 bytes, have 2"))...),
			),
		},
		{
			rule: "BadLengthPrefixBeforeHelloIsRefused",
			size: 1,
			steps: script(open(1), step{
				in:   Malformed{Conn: 1, Err: errEmptyFrame},
				want: refused(1, "bad hello: malformed frame: empty frame (length 0)"),
			}),
		},
		{
			rule: "BadLengthPrefixIsProtocolError",
			size: 1,
			steps: script(connect(1, 0), step{
				in: Malformed{Conn: 1, Err: errEmptyFrame},
				want: lines(
					protoErr(1, []int{0}, "malformed frame: empty frame (length 0)"),
					failed(0, "malformed frame: empty frame (length 0)")),
			}),
		},
		{
			rule: "UnknownFrameTypeIsProtocolError",
			size: 1,
			steps: script(
				connect(1, 0),
				recvRaw(1, []byte{0x42}, lines(
					protoErr(1, []int{0}, "malformed frame: unknown frame type 0x42"),
					failed(0, "malformed frame: unknown frame type 0x42"))...),
			),
		},
		{
			rule: "InputFromForgottenConnectionIsIgnored",
			size: 1,
			steps: script(
				open(1),
				recv(1, put(0, "k", "v"), refused(1, "protocol error: expected hello, got put frame")...),
				recv(1, hello(1, 0)),
				closed(1, io.EOF),
				recv(7, fence(0)),
				closed(7, io.EOF),
			),
		},
		{
			rule:  "ReusedConnIDIsIgnored",
			size:  1,
			steps: script(connect(1, 0), open(1, []string{}...)),
		},

		// ---- put and fence ----
		{
			rule: "FenceCompletesWhenLastRankJoins",
			size: 3,
			steps: script(
				connect(1, 0), connect(2, 1), connect(3, 2),
				recv(1, put(0, "a", "1")),
				recv(1, fence(0)),
				recv(3, fence(2)),
				recv(2, fence(1),
					`send 1 fence-result epoch=0 {a="1"}`,
					`send 2 fence-result epoch=0 {a="1"}`,
					`send 3 fence-result epoch=0 {a="1"}`,
					"report fence of epoch 0 done: 1 keys, 10 bytes"),
			),
		},
		{
			rule: "FenceWaitsForRanksNotYetConnected",
			size: 2,
			steps: script(
				connect(1, 0),
				recv(1, put(0, "a", "1")),
				recv(1, fence(0)),
				connect(2, 1),
				recv(2, fence(1),
					`send 1 fence-result epoch=0 {a="1"}`,
					`send 2 fence-result epoch=0 {a="1"}`,
					"report fence of epoch 0 done: 1 keys, 10 bytes"),
			),
		},
		{
			rule: "EachFenceReturnsOnlyThePairsOfItsEpoch",
			size: 2,
			steps: script(
				connect(1, 0), connect(2, 1),
				recv(1, put(0, "a", "1")),
				recv(2, put(1, "b", "22")),
				recv(1, fence(0)),
				recv(2, fence(1),
					`send 1 fence-result epoch=0 {a="1" b="22"}`,
					`send 2 fence-result epoch=0 {a="1" b="22"}`,
					"report fence of epoch 0 done: 2 keys, 21 bytes"),
				recv(2, put(1, "c", "3")),
				recv(2, fence(1)),
				recv(1, fence(0),
					`send 1 fence-result epoch=1 {c="3"}`,
					`send 2 fence-result epoch=1 {c="3"}`,
					"report fence of epoch 1 done: 1 keys, 10 bytes"),
				recv(1, fence(0)),
				recv(2, fence(1),
					`send 1 fence-result epoch=2 {}`,
					`send 2 fence-result epoch=2 {}`,
					"report fence of epoch 2 done: 0 keys, 0 bytes"),
			),
		},
		{
			rule: "SameKeyMayBePutAgainInALaterEpochByAnyRank",
			size: 2,
			steps: script(
				connect(1, 0), connect(2, 1),
				recv(1, put(0, "k", "from0")),
				recv(1, fence(0)),
				recv(2, fence(1), "send 1 fence-result epoch=0 {k=\"from0\"}", "send 2 ...", "report ..."),
				recv(2, put(1, "k", "from1")),
				recv(1, fence(0)),
				recv(2, fence(1), "send 1 fence-result epoch=1 {k=\"from1\"}", "send 2 ...", "report ..."),
			),
		},
		{
			rule: "RankMayReplaceItsOwnKeyInAnEpoch",
			size: 1,
			steps: script(
				connect(1, 0),
				recv(1, put(0, "k", "old value")),
				recv(1, put(0, "k", "new")),
				recv(1, fence(0), `send 1 fence-result epoch=0 {k="new"}`, "report fence of epoch 0 done: 1 keys, 12 bytes"),
			),
		},
		{
			rule: "KeyPutByTwoRanksInAnEpochIsProtocolError",
			size: 2,
			steps: script(
				connect(1, 0), connect(2, 1),
				recv(1, put(0, "k", "a")),
				recv(2, put(1, "k", "b"), lines(
					protoErr(2, []int{1}, `rank 1: key "k" already put by rank 0 in epoch 0`),
					failed(1, `rank 1: key "k" already put by rank 0 in epoch 0`, 1))...),
			),
		},
		{
			rule: "EmptyKeyIsProtocolError",
			size: 1,
			steps: script(
				connect(1, 0),
				recv(1, put(0, "", "v"), lines(
					protoErr(1, []int{0}, "rank 0: put with an empty key"),
					failed(0, "rank 0: put with an empty key"))...),
			),
		},
		{
			rule: "KeyLongerThanMaxKeyLenIsProtocolError",
			size: 1,
			steps: script(
				connect(1, 0),
				recv(1, put(0, strings.Repeat("k", MaxKeyLen+1), "v"), lines(
					protoErr(1, []int{0}, "malformed frame: put frame: string of 1025 bytes exceeds the limit of 1024"),
					failed(0, "malformed frame: put frame: string of 1025 bytes exceeds the limit of 1024"))...),
			),
		},
		{
			rule:  "PairsOfAnEpochMustFitInOneFrame",
			size:  1,
			tweak: func(m *Machine) { m.maxEpochBytes = 30 },
			steps: script(
				connect(1, 0),
				recv(1, put(0, "a", "0123456789")),           // 19 bytes
				recv(1, put(0, "a", "01234567890123456789")), // replaces: 29 bytes
				recv(1, put(0, "b", "1"), lines(
					protoErr(1, []int{0}, `rank 0: put of "b": the pairs of epoch 0 would exceed 30 bytes`),
					failed(0, `rank 0: put of "b": the pairs of epoch 0 would exceed 30 bytes`))...),
			),
		},
		{
			rule: "PutWhileWaitingForFenceIsProtocolError",
			size: 2,
			steps: script(
				connect(1, 0), connect(2, 1),
				recv(1, fence(0)),
				recv(1, put(0, "k", "v"), lines(
					protoErr(1, []int{0}, "rank 0: put while waiting for the fence of epoch 0"),
					failed(0, "rank 0: put while waiting for the fence of epoch 0", 2))...),
			),
		},
		{
			rule: "FenceTwiceInAnEpochIsProtocolError",
			size: 2,
			steps: script(
				connect(1, 0), connect(2, 1),
				recv(1, fence(0)),
				recv(1, fence(0), lines(
					protoErr(1, []int{0}, "rank 0: fence twice in epoch 0"),
					failed(0, "rank 0: fence twice in epoch 0", 2))...),
			),
		},
		{
			rule: "FenceResultGoesOncePerConnection",
			size: 2,
			steps: script(
				connect(1, 0, 1),
				recv(1, fence(1)),
				recv(1, fence(0), "send 1 fence-result epoch=0 {}", "report fence of epoch 0 done: 0 keys, 0 bytes"),
			),
		},

		// ---- finalize ----
		{
			rule: "FinalizeIsAcknowledged",
			size: 2,
			steps: script(
				connect(1, 0),
				recv(1, finalize(0), "send 1 finalized rank=0", "report rank 0 finalized"),
				closed(1, io.EOF),
			),
		},
		{
			rule: "AllFinalizedIsReportedAfterTheLastRank",
			size: 2,
			steps: script(
				connect(1, 0), connect(2, 1),
				recv(2, finalize(1), "send 2 finalized rank=1", "report rank 1 finalized"),
				recv(1, finalize(0), "send 1 finalized rank=0", "report rank 0 finalized", "report all ranks finalized"),
				closed(2, io.EOF),
				closed(1, io.EOF),
			),
		},
		{
			rule: "FinalizedRanksDoNotHoldUpAFence",
			size: 3,
			steps: script(
				connect(1, 0), connect(2, 1), connect(3, 2),
				recv(1, fence(0)),
				recv(2, fence(1)),
				recv(3, finalize(2),
					"send 3 finalized rank=2",
					"report rank 2 finalized",
					"send 1 fence-result epoch=0 {}",
					"send 2 fence-result epoch=0 {}",
					"report fence of epoch 0 done: 0 keys, 0 bytes"),
				recv(1, fence(0)),
				recv(2, fence(1), "send 1 fence-result epoch=1 {}", "send 2 fence-result epoch=1 {}", "report ..."),
			),
		},
		{
			rule: "PutAfterFinalizeIsProtocolError",
			size: 2,
			steps: script(
				connect(1, 0), connect(2, 1),
				recv(1, finalize(0), "send 1 finalized rank=0", "report rank 0 finalized"),
				// Rank 0 had finalized, so it is not lost and the job goes on.
				recv(1, put(0, "k", "v"), protoErr(1, []int{0}, "rank 0: put after finalize")...),
				recv(2, fence(1), "send 2 fence-result epoch=0 {}", "report ..."),
			),
		},
		{
			rule: "FenceAfterFinalizeIsProtocolError",
			size: 2,
			steps: script(
				connect(1, 0),
				recv(1, finalize(0), "send 1 finalized rank=0", "report rank 0 finalized"),
				recv(1, fence(0), protoErr(1, []int{0}, "rank 0: fence after finalize")...),
			),
		},
		{
			rule: "FinalizeTwiceIsProtocolError",
			size: 2,
			steps: script(
				connect(1, 0),
				recv(1, finalize(0), "send 1 finalized rank=0", "report rank 0 finalized"),
				recv(1, finalize(0), protoErr(1, []int{0}, "rank 0: finalize after finalize")...),
			),
		},
		{
			rule: "AbortAfterFinalizeIsProtocolError",
			size: 2,
			steps: script(
				connect(1, 0),
				recv(1, finalize(0), "send 1 finalized rank=0", "report rank 0 finalized"),
				recv(1, abort(0, 1, "late"), protoErr(1, []int{0}, "rank 0: abort after finalize")...),
			),
		},
		{
			rule: "FinalizeWhileWaitingForFenceIsProtocolError",
			size: 2,
			steps: script(
				connect(1, 0), connect(2, 1),
				recv(1, fence(0)),
				recv(1, finalize(0), lines(
					protoErr(1, []int{0}, "rank 0: finalize while waiting for the fence of epoch 0"),
					failed(0, "rank 0: finalize while waiting for the fence of epoch 0", 2))...),
			),
		},

		// ---- the end of a job ----
		{
			rule: "AbortIsSentToEveryConnectionAndEndsTheJob",
			size: 3,
			steps: script(
				connect(1, 0), connect(2, 1),
				open(3),
				recv(2, abort(1, 3, "boom"),
					"report rank 1 aborted the job (code 3): boom",
					`send 1 aborted rank=1 code=3 "boom"`,
					"close 1: job aborted by rank 1 (code 3): boom",
					`send 2 aborted rank=1 code=3 "boom"`,
					"close 2: job aborted by rank 1 (code 3): boom",
					`send 3 refused "job aborted by rank 1 (code 3): boom"`,
					"close 3: job aborted by rank 1 (code 3): boom"),
				open(4, refused(4, "job aborted by rank 1 (code 3): boom")...),
				closed(1, io.EOF),
			),
		},
		{
			rule: "ConnectionLostBeforeFinalizeFailsTheJob",
			size: 3,
			steps: script(
				connect(1, 0), connect(2, 1), connect(3, 2),
				recv(3, finalize(2), "send 3 finalized rank=2", "report rank 2 finalized"),
				closed(1, io.ErrUnexpectedEOF, failed(0, "unexpected EOF", 2, 3)...),
				open(4, refused(4, "job failed: rank 0 lost: unexpected EOF")...),
				closed(2, io.EOF),
			),
		},
		{
			rule: "LostProxyLosesEachUnfinalizedRank",
			size: 3,
			steps: script(
				connect(1, 0, 1, 2),
				recv(1, finalize(1), "send 1 finalized rank=1", "report rank 1 finalized"),
				closed(1, io.EOF, "report rank 0 lost: EOF", "report rank 2 lost: EOF"),
			),
		},
		{
			rule: "ConnectionEndingAfterFinalizeIsNotLost",
			size: 2,
			steps: script(
				connect(1, 0), connect(2, 1),
				recv(1, finalize(0), "send 1 finalized rank=0", "report rank 0 finalized"),
				closed(1, io.EOF),
				recv(2, fence(1), "send 2 fence-result epoch=0 {}", "report ..."),
			),
		},
		{
			rule: "ShutdownClosesEveryConnectionWithTheReason",
			size: 2,
			steps: script(
				connect(1, 0),
				open(2),
				shutdown("interrupted",
					`send 1 closing "interrupted"`, "close 1: interrupted",
					`send 2 refused "interrupted"`, "close 2: interrupted"),
				open(3, refused(3, "interrupted")...),
				shutdown("again"),
			),
		},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			var tweaks []func(*Machine)
			if tt.tweak != nil {
				tweaks = append(tweaks, tt.tweak)
			}
			run(t, tt.size, tt.steps, tweaks...)
		})
	}
}

// TestFenceResultIsEncodedOnceForAllConnections checks that every
// connection is sent the very same bytes.
func TestFenceResultIsEncodedOnceForAllConnections(t *testing.T) {
	const size = 4
	var steps []step
	for r := range size {
		steps = append(steps, connect(ConnID(r+1), r)...)
		steps = append(steps, recv(ConnID(r+1), put(r, fmt.Sprint("card/", r), "card")))
	}
	for r := range size - 1 {
		steps = append(steps, recv(ConnID(r+1), fence(r)))
	}
	m := run(t, size, steps)
	acts := m.Step(Received{Conn: size, Body: encodeFrame(fence(size - 1))[4:]})
	var first []byte
	sends := 0
	for _, a := range acts {
		s, ok := a.(Send)
		if !ok {
			continue
		}
		sends++
		if first == nil {
			first = s.Frame
		} else if &s.Frame[0] != &first[0] || len(s.Frame) != len(first) {
			t.Errorf("conn %d was sent a different encoding of the fence result", s.Conn)
		}
	}
	if sends != size {
		t.Errorf("%d sends, want %d", sends, size)
	}
}

// TestMachineStoresCopiesOfValues checks that the driver may reuse a
// frame's buffer after Step.
func TestMachineStoresCopiesOfValues(t *testing.T) {
	m := run(t, 1, connect(1, 0))
	body := encodeFrame(put(0, "k", "value"))[4:]
	m.Step(Received{Conn: 1, Body: body})
	for i := range body {
		body[i] = 'X'
	}
	acts := m.Step(Received{Conn: 1, Body: encodeFrame(fence(0))[4:]})
	if got, want := render(acts[0]), `send 1 fence-result epoch=0 {k="value"}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestNewMachineChecksConfig(t *testing.T) {
	for _, cfg := range []MachineConfig{
		{Size: 0, Job: testJob, Secret: testSecret},
		{Size: 1, Job: "", Secret: testSecret},
		{Size: 1, Job: strings.Repeat("j", MaxJobLen+1), Secret: testSecret},
		{Size: 1, Job: testJob, Secret: testSecret[:16]},
	} {
		if _, err := NewMachine(cfg); err == nil {
			t.Errorf("NewMachine(size %d, job of %d bytes, secret of %d bytes) succeeded", cfg.Size, len(cfg.Job), len(cfg.Secret))
		}
	}
}

// BenchmarkMachinePut measures one put step on an authenticated connection.
func BenchmarkMachinePut(b *testing.B) {
	m, _ := NewMachine(MachineConfig{Size: 1, Job: testJob, Secret: testSecret})
	m.Step(Opened{Conn: 1, Nonce: nonceFor(1)})
	m.Step(Received{Conn: 1, Body: encodeFrame(hello(1, 0))[4:]})
	body := encodeFrame(put(0, "card/0", string(make([]byte, 200))))[4:]
	b.ReportAllocs()
	for b.Loop() {
		m.Step(Received{Conn: 1, Body: body})
	}
}

// FuzzMachineFrames feeds arbitrary frames from two authenticated
// connections (one a proxy for two ranks) to a Machine. Nothing may panic,
// every Send must carry a well-formed frame, and the fence bookkeeping must
// stay consistent.
func FuzzMachineFrames(f *testing.F) {
	f.Add(append(encodeFrame(put(0, "k", "v")), encodeFrame(fence(0))...), []byte{1, 2})
	f.Add(append(encodeFrame(fence(1)), encodeFrame(fence(2))...), []byte{2, 2})
	f.Add(append(encodeFrame(finalize(1)), encodeFrame(abort(0, 1, "x"))...), []byte{2, 1})
	f.Fuzz(func(t *testing.T, stream, route []byte) {
		m, _ := NewMachine(MachineConfig{Size: 3, Job: testJob, Secret: testSecret})
		m.Step(Opened{Conn: 1, Nonce: nonceFor(1)})
		m.Step(Received{Conn: 1, Body: encodeFrame(hello(1, 0))[4:]})
		m.Step(Opened{Conn: 2, Nonce: nonceFor(2)})
		m.Step(Received{Conn: 2, Body: encodeFrame(hello(2, 1, 2))[4:]})
		r := bytes.NewReader(stream)
		for i := 0; ; i++ {
			body, err := readFrame(r, nil, maxHandshakeFrame)
			if err != nil {
				break
			}
			conn := ConnID(1)
			if len(route) > 0 {
				conn = ConnID(route[i%len(route)] % 4) // 0 and 3 are unknown
			}
			for _, a := range m.Step(Received{Conn: conn, Body: body}) {
				if s, ok := a.(Send); ok {
					if _, err := decodeMessage(s.Frame[4:]); err != nil {
						t.Fatalf("machine sent a malformed frame: %v", err)
					}
				}
			}
			if m.joined < 0 || m.joined > m.size-m.finalized {
				t.Fatalf("joined %d with %d of %d ranks finalized", m.joined, m.finalized, m.size)
			}
		}
	})
}
