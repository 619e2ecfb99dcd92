package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// badCase is one piece of bad input: jiarun must exit 2 with a message that
// names the problem, and start nothing.
type badCase struct {
	name  string
	files map[string]string // written in the test's directory first
	args  []string          // "PROG" is replaced by a touch-mode rankprog
	want  []string          // substrings of stderr
}

func TestBadInput(t *testing.T) {
	cases := []badCase{
		{name: "no program", args: []string{"-np", "2"}, want: []string{"no PROGRAM given"}},
		{name: "missing program", args: []string{"-np", "2", "./no-such-program"}, want: []string{`program "./no-such-program": no such file or directory`}},
		{name: "missing program in PATH", args: []string{"-np", "2", "no-such-program-xyz"}, want: []string{`program "no-such-program-xyz": not found in PATH`}},
		{name: "not executable", files: map[string]string{"plain": "#!/bin/sh\n"}, args: []string{"-np", "2", "./plain"}, want: []string{`program "./plain": not executable`}},
		{name: "directory without Go main", files: map[string]string{"empty/README": "x"}, args: []string{"-np", "2", "./empty"}, want: []string{`program "./empty" is a directory without a Go main package`}},
		{name: "np zero", args: []string{"-np", "0", "PROG"}, want: []string{"-np 0: the number of ranks must be at least 1"}},
		{name: "np negative", args: []string{"-np", "-3", "PROG"}, want: []string{"-np -3: the number of ranks must be at least 1"}},
		{name: "np not a number", args: []string{"-np", "four", "PROG"}, want: []string{`invalid value "four" for flag -np`}},
		{name: "more ranks than -H slots", args: []string{"-np", "3", "-H", "localhost:2", "PROG"}, want: []string{"-np 3 exceeds the 2 slots of -H localhost:2 (use --oversubscribe to allow it)"}},
		{name: "more ranks than hostfile slots", files: map[string]string{"hosts": "localhost slots=2\n"}, args: []string{"-np", "5", "-f", "hosts", "PROG"}, want: []string{"-np 5 exceeds the 2 slots of hosts", "--oversubscribe"}},
		{name: "hosts.toml syntax error", files: map[string]string{"hosts.toml": "[[host]]\nname = \"localhost\"\nslots = = 2\n"}, args: []string{"-f", "hosts.toml", "PROG"}, want: []string{"hosts.toml:3:"}},
		{name: "hosts.toml unknown key", files: map[string]string{"hosts.toml": "[[host]]\nname = \"localhost\"\nslot = 2\n"}, args: []string{"-f", "hosts.toml", "PROG"}, want: []string{"hosts.toml:3:", `unknown key "host.slot"`}},
		{name: "hosts.toml duplicate host", files: map[string]string{"hosts.toml": "[[host]]\nname = \"localhost\"\n\n[[host]]\nname = \"localhost\"\n"}, args: []string{"-f", "hosts.toml", "PROG"}, want: []string{"hosts.toml:5:", `duplicate host "localhost" (first defined at line 2)`}},
		{name: "hosts.toml zero slots", files: map[string]string{"hosts.toml": "[[host]]\nname = \"localhost\"\nslots = 0\n"}, args: []string{"-f", "hosts.toml", "PROG"}, want: []string{"hosts.toml:3:", `host "localhost": slots must be at least 1`}},
		{name: "jia.toml unknown key", files: map[string]string{"run.toml": "[dsm]\nprefech_pages = 4\n"}, args: []string{"--config", "run.toml", "PROG"}, want: []string{"run.toml:2:", `unknown key "dsm.prefech_pages"`}},
		{name: "missing config file", args: []string{"--config", "nope.toml", "PROG"}, want: []string{"nope.toml"}},
		{name: "bad transport", args: []string{"--transport", "ib", "PROG"}, want: []string{"--transport", `"ib"`}},
		{name: "bad stdin rank", args: []string{"--stdin", "first", "-np", "2", "PROG"}, want: []string{`--stdin "first": want a rank number or none`}},
		{name: "bad env", args: []string{"--env", "NOEQUALS", "PROG"}, want: []string{`--env "NOEQUALS": want KEY=VALUE`}},
		{name: "both host lists", args: []string{"-H", "localhost:2", "-f", "hosts", "PROG"}, want: []string{"-H and --hostfile both given"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range c.files {
				p := filepath.Join(dir, name)
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			marker := filepath.Join(dir, "started")
			var args []string
			for _, a := range c.args {
				if a == "PROG" {
					args = append(args, rankprog, "touch", marker)
					continue
				}
				args = append(args, a)
			}
			r := runIn(t, dir, args...)
			if r.code != 2 {
				t.Errorf("exit %d, want 2\n%v", r.code, r)
			}
			for _, w := range c.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q\n%v", w, r)
				}
			}
			if ents, _ := filepath.Glob(marker + "*"); len(ents) > 0 {
				t.Errorf("a rank was started: %v", ents)
			}
		})
	}
}

func runIn(t *testing.T, dir string, args ...string) result {
	t.Helper()
	cmd := exec.Command(jiarun, args...)
	cmd.Dir = dir
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		t.Fatalf("jiarun %v did not finish", args)
	}
	return result{cmd.ProcessState.ExitCode(), so.String(), se.String()}
}

func TestOversubscribeAllowsMoreRanks(t *testing.T) {
	r := run(t, "", "-np", "3", "-H", "localhost:2", "--oversubscribe", hello)
	if r.code != 0 || len(lines(r.stdout)) != 3 {
		t.Fatalf("want 3 lines and exit 0\n%v", r)
	}
}

func TestHostfileSlots(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte("[[host]]\nname = \"localhost\"\nslots = 3\n"), 0o644)
	r := runIn(t, dir, "-f", "hosts.toml", hello)
	if r.code != 0 || len(lines(r.stdout)) != 3 {
		t.Fatalf("without -np a host file gives one rank per slot: want 3 lines and exit 0\n%v", r)
	}
}

func TestWrongSecretIsRefused(t *testing.T) {
	prog := copyProg(t)
	r := run(t, "", "-np", "3", prog, "badsecret")
	if r.code != 2 {
		t.Fatalf("want exit 2\n%v", r)
	}
	for _, w := range []string{
		"jiarun: refused a rendezvous connection from 127.0.0.1:",
		"jia: init: rank 1: rendezvous",
		"authentication failed",
		"rank 1 (pid",
	} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr lacks %q\n%v", w, r)
		}
	}
	waitGone(t, prog, 2*time.Second)
}

func TestCallBeforeInit(t *testing.T) {
	r := run(t, "", "-np", "2", rankprog, "beforeinit")
	if r.code != 2 {
		t.Fatalf("want exit 2\n%v", r)
	}
	if !strings.Contains(r.stderr, "jia.Rank called before jia.Init") {
		t.Errorf("stderr does not name the call\n%v", r)
	}
}

// TestPortsPerRank counts the sockets of a 16-rank job while it runs: one
// listening TCP port and one UDP endpoint per rank, plus the launcher's one
// rendezvous port: n ports for n ranks, not n².
func TestPortsPerRank(t *testing.T) {
	const np = 16
	prog := copyProg(t)
	cmd := exec.Command(jiarun, "-np", strconv.Itoa(np), prog, "hold")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	pids := []int{cmd.Process.Pid}
	for len(pids) < np+1 && sc.Scan() {
		var rank, pid int
		if _, err := fmt.Sscanf(sc.Text(), "ready %d %d", &rank, &pid); err == nil {
			pids = append(pids, pid)
		}
	}
	if len(pids) != np+1 {
		t.Fatalf("only %d ranks ready; stderr:\n%s", len(pids)-1, stderr.String())
	}
	listen, udp := countSockets(t, pids)
	if listen != np+1 || udp != np {
		t.Errorf("%d listening TCP sockets and %d UDP sockets, want %d and %d", listen, udp, np+1, np)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("jiarun: %v; stderr:\n%s", err, stderr.String())
	}
}

// countSockets counts listening TCP sockets and UDP sockets owned by pids.
func countSockets(t *testing.T, pids []int) (listen, udp int) {
	t.Helper()
	inodes := map[string]bool{}
	for _, pid := range pids {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			t.Fatalf("pid %d: %v", pid, err)
		}
		for _, fd := range fds {
			l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if err == nil && strings.HasPrefix(l, "socket:[") {
				inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
			}
		}
	}
	scan := func(file string, f func(state, inode string)) {
		b, err := os.ReadFile(file)
		if err != nil {
			return
		}
		for i, l := range strings.Split(string(b), "\n") {
			fs := strings.Fields(l)
			if i == 0 || len(fs) < 10 {
				continue
			}
			f(fs[3], fs[9])
		}
	}
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		scan(file, func(state, inode string) {
			if inodes[inode] && state == "0A" {
				listen++
			}
		})
	}
	for _, file := range []string{"/proc/net/udp", "/proc/net/udp6"} {
		scan(file, func(_, inode string) {
			if inodes[inode] {
				udp++
			}
		})
	}
	return listen, udp
}
