package launcher

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os/exec"
	"strings"
	"testing"
)

func TestLinkFramesRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := newLinkWriter(&buf)
	w.send(linkOutput, uv(7), []byte{1}, []byte("a line\n"))
	w.send(linkExit, exitPayload(3, -1, 9))
	w.sendJSON(linkLaunch, launchSpec{Job: "j1", Ranks: []int{4, 5}})
	r := bufio.NewReader(&buf)

	typ, body, err := readLinkFrame(r)
	if err != nil || typ != linkOutput {
		t.Fatalf("frame 1: %#x %v", typ, err)
	}
	v, rest, err := payload(body, 1)
	if err != nil || v[0] != 7 || rest[0] != 1 || string(rest[1:]) != "a line\n" {
		t.Fatalf("output payload: %v %q %v", v, rest, err)
	}
	typ, body, _ = readLinkFrame(r)
	rank, code, sig, err := decodeExit(body)
	if typ != linkExit || err != nil || rank != 3 || code != -1 || sig != 9 {
		t.Fatalf("exit: %d %d %d %v", rank, code, sig, err)
	}
	typ, body, _ = readLinkFrame(r)
	if typ != linkLaunch || !strings.Contains(string(body), `"Ranks":[4,5]`) {
		t.Fatalf("launch: %q", body)
	}
	if _, _, err := readLinkFrame(r); err == nil {
		t.Fatal("read past the end")
	}
}

func TestLinkRejectsMalformedFrames(t *testing.T) {
	for _, b := range [][]byte{{0, 0, 0, 0}, {0xff, 0xff, 0xff, 0xff, 1}, {0, 0, 0, 5, 1}} {
		if _, _, err := readLinkFrame(bufio.NewReader(bytes.NewReader(b))); err == nil {
			t.Errorf("%v accepted", b)
		}
	}
	if _, _, _, err := decodeExit([]byte{0x80}); err == nil {
		t.Error("truncated exit accepted")
	}
}

// TestAgentCommandQuotesForRemoteShells checks that a command given to
// ssh survives the remote shell word for word, and that other agents get
// plain arguments.
func TestAgentCommandQuotesForRemoteShells(t *testing.T) {
	script := `echo "it's $HOME"; printf '%s\n' a\ b`
	argv := agentCommand([]string{"ssh", "-x"}, "node1", "sh", "-c", script)
	if len(argv) != 4 || argv[2] != "node1" {
		t.Fatalf("argv %q", argv)
	}
	// What the remote shell would run: the one string, parsed by sh.
	out, err := exec.Command("sh", "-c", "set -- "+argv[3]+`; printf '%s|' "$@"`).Output()
	if err != nil || string(out) != "sh|-c|"+script+"|" {
		t.Fatalf("remote words %q, %v", out, err)
	}
	argv = agentCommand([]string{"srun", "--nodelist"}, "node1", "sh", "-c", script)
	if strings.Join(argv, "\x00") != strings.Join([]string{"srun", "--nodelist", "node1", "sh", "-c", script}, "\x00") {
		t.Fatalf("srun argv %q", argv)
	}
}

func TestBootstrapScriptStagesOnce(t *testing.T) {
	home := t.TempDir()
	bin := []byte("#!/bin/sh\necho proxy \"$@\"\n")
	h := fileHash{Hash: sha256hex(bin), Size: int64(len(bin))}
	run := func(stdin []byte) string {
		cmd := exec.Command("sh", "-c", bootstrapScript(h))
		cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
		cmd.Stdin = bytes.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return string(out)
	}
	if got := run(bin); got != markNeed+"\n"+markReady+"\nproxy proxy\n" {
		t.Fatalf("first run: %q", got)
	}
	if got := run(nil); got != markReady+"\nproxy proxy\n" {
		t.Fatalf("second run: %q", got)
	}
	// A corrupted transfer is refused and leaves nothing runnable.
	h2 := fileHash{Hash: sha256hex([]byte("other")), Size: int64(len(bin))}
	cmd := exec.Command("sh", "-c", bootstrapScript(h2))
	cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
	cmd.Stdin = bytes.NewReader(bin)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "failed its hash check") {
		t.Fatalf("corrupted transfer: %v %s", err, out)
	}
}

func sha256hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
