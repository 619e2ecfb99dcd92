package rendezvous

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the fuzz seed corpus in testdata/fuzz")

// sampleMessages holds one message of each frame type.
func sampleMessages() map[string]message {
	return map[string]message{
		"challenge":    &challengeMsg{version: Version, nonce: nonceFor(3)},
		"hello":        hello(3, 0, 5, 7),
		"welcome":      &welcomeMsg{size: 1024, epoch: 2},
		"refused":      &refusedMsg{reason: "authentication failed (wrong job secret)"},
		"put":          put(5, "card/5", "\x01tcp 10.0.0.5:4711"),
		"put-empty":    put(0, "k", ""),
		"fence":        fence(1023),
		"fence-result": &fenceResultMsg{epoch: 1, pairs: map[string][]byte{"card/0": []byte("zero"), "card/1": []byte("one"), "x": {}}},
		"fence-empty":  &fenceResultMsg{epoch: 0, pairs: map[string][]byte{}},
		"abort":        abort(2, 3, "bad input"),
		"aborted":      &abortedMsg{rank: 2, code: -1, text: "bad input"},
		"finalize":     finalize(7),
		"finalized":    &finalizedMsg{rank: 7},
		"closing":      &closingMsg{reason: "job failed: rank 1 lost: EOF"},
	}
}

func TestFrameRoundTrip(t *testing.T) {
	var stream bytes.Buffer
	msgs := sampleMessages()
	var names []string
	for name, m := range msgs {
		names = append(names, name)
		stream.Write(encodeFrame(m))
	}
	for _, name := range names {
		body, err := readFrame(&stream, nil, MaxFrame)
		if err != nil {
			t.Fatalf("%s: readFrame: %v", name, err)
		}
		got, err := decodeMessage(body)
		if err != nil {
			t.Fatalf("%s: decode: %v", name, err)
		}
		if !equalMessages(got, msgs[name]) {
			t.Errorf("%s: round trip gave %s, want %s", name, describe(got), describe(msgs[name]))
		}
	}
	if _, err := readFrame(&stream, nil, MaxFrame); err != io.EOF {
		t.Errorf("at the end of the stream: %v, want io.EOF", err)
	}
}

// equalMessages compares messages, treating nil and empty slices alike.
func equalMessages(a, b message) bool {
	return bytes.Equal(encodeFrame(a), encodeFrame(b)) && reflect.TypeOf(a) == reflect.TypeOf(b)
}

func TestReadFrameChecksLength(t *testing.T) {
	tests := []struct {
		rule  string
		input []byte
		max   int
		want  string
	}{
		{"ZeroLengthIsAnError", []byte{0, 0, 0, 0}, 16, "empty frame"},
		{"LengthAboveLimitIsAnError", []byte{0, 0, 0, 17, 1}, 16, "frame of 17 bytes exceeds the limit of 16 bytes"},
		{"HugeLengthIsAnErrorNotAnAllocation", []byte{0xff, 0xff, 0xff, 0xff}, MaxFrame, "exceeds the limit"},
		{"CutBodyIsUnexpectedEOF", []byte{0, 0, 0, 3, 1, 2}, 16, "unexpected EOF"},
		{"CutHeaderIsUnexpectedEOF", []byte{0, 0}, 16, "unexpected EOF"},
		{"NothingIsEOF", nil, 16, "EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			_, err := readFrame(bytes.NewReader(tt.input), nil, tt.max)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("readFrame(%x) = %v, want an error containing %q", tt.input, err, tt.want)
			}
		})
	}
}

func TestReadFrameReusesBuffer(t *testing.T) {
	buf := make([]byte, 0, 64)
	body, err := readFrame(bytes.NewReader(encodeFrame(fence(1))), buf, MaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	if &body[:1][0] != &buf[:1][0] {
		t.Error("readFrame allocated although the buffer was large enough")
	}
}

func TestDecodeRejectsMalformedFrames(t *testing.T) {
	u32 := func(v uint32) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	tests := []struct {
		rule string
		body []byte
		want string
	}{
		{"EmptyBody", nil, "empty frame"},
		{"UnknownType", []byte{0x7f}, "unknown frame type 0x7f"},
		{"TruncatedInteger", []byte{typeFence, 0}, "fence frame: truncated: need 4 bytes, have 1"},
		{"TrailingBytes", cat([]byte{typeFence}, u32(1), []byte{9}), "fence frame: 1 trailing bytes"},
		{"RankAboveInt32", cat([]byte{typeFinalize}, u32(1<<31)), "integer 2147483648 out of range"},
		{"StringLongerThanFrame", cat([]byte{typePut}, u32(0), u32(1000), []byte("k")), "length 1000 exceeds the 1 bytes left"},
		{"KeyLongerThanMaxKeyLen", cat([]byte{typePut}, u32(0), u32(MaxKeyLen+1), bytes.Repeat([]byte("k"), MaxKeyLen+1), u32(0)), "string of 1025 bytes exceeds the limit of 1024"},
		{"RankCountLargerThanFrame", cat([]byte{typeHello}, u32(1), u32(1), []byte("j"), u32(1<<30)), "rank count 1073741824 exceeds"},
		{"HelloWithoutMAC", cat([]byte{typeHello}, u32(1), u32(1), []byte("j"), u32(0)), "truncated: need 32 bytes, have 0"},
		{"EntryCountLargerThanFrame", cat([]byte{typeFenceResult}, u32(0), u32(1<<30)), "entry count 1073741824 exceeds"},
		{"DuplicateKeyInFenceResult", cat([]byte{typeFenceResult}, u32(0), u32(2), u32(1), []byte("k"), u32(0), u32(1), []byte("k"), u32(0)), `key "k" appears twice`},
		{"ChallengeWithShortNonce", cat([]byte{typeChallenge}, u32(1), make([]byte, 31)), "truncated: need 32 bytes, have 31"},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			m, err := decodeMessage(tt.body)
			if err == nil {
				t.Fatalf("decoded %s", describe(m))
			}
			if tt.body != nil && !errors.Is(err, errMalformed) {
				t.Errorf("error %v does not wrap errMalformed", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

// FuzzDecodeFrame feeds arbitrary bytes to the frame reader and decoder, as
// a peer could. Nothing may panic, and whatever decodes must encode back to
// a frame that decodes to the same message.
func FuzzDecodeFrame(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for {
			body, err := readFrame(r, nil, maxHandshakeFrame)
			if err != nil {
				return
			}
			m, err := decodeMessage(body)
			if err != nil {
				continue
			}
			again := encodeFrame(m)
			m2, err := decodeMessage(again[4:])
			if err != nil {
				t.Fatalf("re-encoded %s does not decode: %v", describe(m), err)
			}
			if !bytes.Equal(encodeFrame(m2), again) {
				t.Fatalf("round trip changed %s into %s", describe(m), describe(m2))
			}
		}
	})
}

// TestFuzzSeedCorpus checks that the seed corpus in testdata/fuzz holds one
// frame of each type as the codec encodes it today, plus a few malformed
// ones. Run with -update to rewrite it.
func TestFuzzSeedCorpus(t *testing.T) {
	seeds := map[string][]byte{}
	for name, m := range sampleMessages() {
		seeds[name] = encodeFrame(m)
	}
	var all []byte
	for _, name := range []string{"challenge", "hello", "welcome", "put", "fence", "fence-result", "finalize", "finalized"} {
		all = append(all, seeds[name]...)
	}
	seeds["stream"] = all
	seeds["bad-zero-length"] = []byte{0, 0, 0, 0}
	seeds["bad-huge-length"] = []byte{0xff, 0xff, 0xff, 0xff, typePut}
	seeds["bad-truncated-put"] = encodeFrame(put(1, "key", "value"))[:12]
	seeds["bad-rank-count"] = []byte{0, 0, 0, 14, typeHello, 0, 0, 0, 1, 0, 0, 0, 0, 0x40, 0, 0, 0, 0}

	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeFrame")
	if *update {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range seeds {
		path := filepath.Join(dir, name)
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%+q)\n", data)
		if *update {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("seed %s: %v (run go test -run TestFuzzSeedCorpus -update)", name, err)
			continue
		}
		if string(got) != want {
			t.Errorf("seed %s is stale (run go test -run TestFuzzSeedCorpus -update)", name)
		}
	}
}
