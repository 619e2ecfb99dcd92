package sshc

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// fixture: one in-process server, a home directory whose ~/.ssh/id_ed25519
// is authorized there and whose ~/.ssh/known_hosts has the server's key.
type fixture struct {
	srv  *testServer
	home string
	key  testKey
	kh   string
	cfg  *Config
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{srv: newTestServer(t), home: t.TempDir(), key: newKey(t, "ed25519")}
	f.srv.authorize(f.key.pub())
	f.key.write(t, filepath.Join(f.home, ".ssh", "id_ed25519"), "")
	f.kh = filepath.Join(f.home, ".ssh", "known_hosts")
	writeFile(t, f.kh, f.srv.knownLine()+"\n")
	f.cfg = &Config{ConfigFile: "none", HomeDir: f.home, AgentSocket: "none", Timeout: 5 * time.Second}
	return f
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func dial(t *testing.T, host string, cfg *Config) *Client {
	t.Helper()
	c, err := Dial(context.Background(), host, cfg)
	if err != nil {
		t.Fatalf("Dial %s: %v", host, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestResolveLikeOpenSSH(t *testing.T) {
	home := t.TempDir()
	cfgFile := filepath.Join(home, "cfg")
	writeFile(t, cfgFile, `
Host alias1
  HostName 127.0.0.5
  User alice
  Port 2200
  IdentityFile ~/.ssh/k1
  IdentityFile %d/.ssh/k_%h_%r
  UserKnownHostsFile ~/kh1 /var/kh2
  HostKeyAlias hka
  StrictHostKeyChecking accept-new
  ConnectTimeout 7
Host jumpy
  HostName 10.0.0.9
  ProxyJump bob@alias1:2222,hop2
Host viahop2
  ProxyJump hop2
Host hop2
  HostName 10.0.0.10
  ProxyJump hop3
Host hop3
  HostName %h.example
Host loop
  ProxyJump loop
Host pc
  ProxyCommand nc %h %p
Host *
  User defuser
  Port 2022
  GlobalKnownHostsFile none
`)
	cfg := &Config{ConfigFile: cfgFile, HomeDir: home}
	resolve := func(c *Config, host string) *Target {
		t.Helper()
		tg, err := c.Resolve(host)
		if err != nil {
			t.Fatalf("Resolve %s: %v", host, err)
		}
		return tg
	}

	a := resolve(cfg, "alias1")
	if a.HostName != "127.0.0.5" || a.User != "alice" || a.Port != 2200 {
		t.Errorf("alias1: %s@%s:%d, want alice@127.0.0.5:2200 (the first value wins over Host *)", a.User, a.HostName, a.Port)
	}
	if want := []string{home + "/.ssh/k1", home + "/.ssh/k_127.0.0.5_alice"}; !slices.Equal(a.IdentityFiles, want) || !a.IdentitiesExplicit {
		t.Errorf("alias1 keys %v (explicit %v), want %v", a.IdentityFiles, a.IdentitiesExplicit, want)
	}
	if want := []string{home + "/kh1", "/var/kh2"}; !slices.Equal(a.KnownHostsFiles, want) {
		t.Errorf("alias1 known_hosts %v, want %v", a.KnownHostsFiles, want)
	}
	if a.KnownHostsName() != "[hka]:2200" || !a.AcceptNew || a.ConnectTimeout != 7*time.Second {
		t.Errorf("alias1: known_hosts name %q, accept-new %v, timeout %v", a.KnownHostsName(), a.AcceptNew, a.ConnectTimeout)
	}

	o := resolve(cfg, "other.example")
	if o.HostName != "other.example" || o.User != "defuser" || o.Port != 2022 || o.IdentitiesExplicit || o.AcceptNew {
		t.Errorf("other: %+v", o)
	}
	if want := []string{home + "/.ssh/id_ed25519", home + "/.ssh/id_ecdsa", home + "/.ssh/id_rsa"}; !slices.Equal(o.IdentityFiles, want) {
		t.Errorf("default keys %v, want %v", o.IdentityFiles, want)
	}
	if want := []string{home + "/.ssh/known_hosts", home + "/.ssh/known_hosts2"}; !slices.Equal(o.KnownHostsFiles, want) {
		t.Errorf("default known_hosts %v, want %v", o.KnownHostsFiles, want)
	}

	// ProxyJump: user@host:port specs, several hops; the first hop's own
	// ProxyJump applies, the later hops' do not (as with ssh -J).
	j := resolve(cfg, "jumpy")
	var hops []string
	for _, h := range j.Jumps {
		hops = append(hops, h.User+"@"+h.Addr())
	}
	if want := []string{"bob@127.0.0.5:2222", "defuser@10.0.0.10:2022"}; !slices.Equal(hops, want) {
		t.Errorf("jumpy hops %v, want %v", hops, want)
	}
	v := resolve(cfg, "viahop2")
	hops = hops[:0]
	for _, h := range v.Jumps {
		hops = append(hops, h.Addr())
	}
	if want := []string{"hop3.example:2022", "10.0.0.10:2022"}; !slices.Equal(hops, want) {
		t.Errorf("viahop2 hops %v, want %v (hop2's own jump first)", hops, want)
	}

	// Config fields override the file for the destination only.
	over := &Config{ConfigFile: cfgFile, HomeDir: home, User: "carol", Port: 2300, IdentityFile: "~/x",
		KnownHostsFiles: []string{"~/kh"}}
	a2 := resolve(over, "alias1")
	if a2.User != "carol" || a2.Port != 2300 || !slices.Equal(a2.IdentityFiles, []string{home + "/x"}) ||
		!slices.Equal(a2.KnownHostsFiles, []string{home + "/kh"}) {
		t.Errorf("overridden alias1: %+v", a2)
	}
	if j2 := resolve(over, "jumpy"); j2.Jumps[0].User != "bob" || j2.Jumps[0].Port != 2222 || j2.User != "carol" {
		t.Errorf("overrides leaked into jump hosts: %s / %s", j2.Jumps[0], j2)
	}

	if s := resolve(cfg, "dave@[::1]:2201"); s.User != "dave" || s.HostName != "::1" || s.Addr() != "[::1]:2201" {
		t.Errorf("dave@[::1]:2201 → %s", s)
	}
	for host, want := range map[string]string{"loop": "ProxyJump hops", "pc": "ProxyCommand is not supported", "x:99999": "port"} {
		if _, err := cfg.Resolve(host); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Resolve %s: %v, want an error with %q", host, err, want)
		}
	}
	if _, err := (&Config{ConfigFile: filepath.Join(home, "missing")}).Resolve("x"); err == nil {
		t.Error("a missing -F file must be an error")
	}

	// The default: ~/.ssh/config is read.
	writeFile(t, filepath.Join(home, ".ssh", "config"), "Host h\n  HostName 10.9.9.9\n  User zed\n")
	if d := resolve(&Config{HomeDir: home}, "h"); d.HostName != "10.9.9.9" || d.User != "zed" {
		t.Errorf("~/.ssh/config not honoured: %s", d)
	}
}

// Commands run with pipes, exit statuses come back, and sessions share the
// one connection.
func TestStartOutputAndSessions(t *testing.T) {
	f := newFixture(t)
	c := dial(t, f.srv.addr, f.cfg)

	out, err := c.Output(context.Background(), "echo hello")
	if err != nil || string(out) != "hello\n" {
		t.Fatalf("Output: %q, %v", out, err)
	}

	s, err := c.Start("cat; echo oops >&2; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	go func() { io.WriteString(s.Stdin, "ping"); s.Stdin.Close() }()
	var stderr []byte
	errDone := make(chan struct{})
	go func() { stderr, _ = io.ReadAll(s.Stderr); close(errDone) }()
	stdout, _ := io.ReadAll(s.Stdout)
	<-errDone
	err = s.Wait()
	var ee *ssh.ExitError
	if string(stdout) != "ping" || string(stderr) != "oops\n" || !errors.As(err, &ee) || ee.ExitStatus() != 3 {
		t.Errorf("stdout %q stderr %q err %v; want ping, oops, exit status 3", stdout, stderr, err)
	}
	if err == nil || !strings.HasPrefix(err.Error(), "host "+f.srv.addr+": ") {
		t.Errorf("error does not name the host: %v", err)
	}
	if _, err := c.Output(context.Background(), "echo bad >&2; exit 5"); err == nil || !strings.Contains(err.Error(), "stderr: bad") {
		t.Errorf("Output of a failing command: %v", err)
	}

	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			out, err := c.Output(context.Background(), "echo "+strconv.Itoa(i))
			if err != nil || string(out) != strconv.Itoa(i)+"\n" {
				t.Errorf("session %d: %q %v", i, out, err)
			}
		})
	}
	wg.Wait()
	if n := f.srv.handshakes.Load(); n != 1 {
		t.Errorf("%d connections for 11 sessions, want 1", n)
	}

	c.Close()
	select {
	case <-c.Done():
	default:
		t.Error("Done not closed after Close")
	}
	if c.Err() != nil {
		t.Errorf("Err after Close: %v", c.Err())
	}
}

// An unknown host is refused with the exact known_hosts line to add, and
// nothing is written or run.
func TestUnknownHostKeyRefusedWithLine(t *testing.T) {
	f := newFixture(t)
	writeFile(t, f.kh, "")
	_, err := Dial(context.Background(), f.srv.addr, f.cfg)
	var he *HostKeyError
	if !errors.As(err, &he) || he.Changed() {
		t.Fatalf("Dial: %v; want an unknown-host *HostKeyError", err)
	}
	want := "[127.0.0.1]:" + strconv.Itoa(f.srv.port) + " ssh-ed25519 "
	if he.Line() != f.srv.knownLine() || !strings.HasPrefix(he.Line(), want) {
		t.Errorf("line %q, want %q", he.Line(), f.srv.knownLine())
	}
	msg := err.Error()
	for _, s := range []string{"host " + f.srv.addr + ": ssh handshake: ", "add this line to " + f.kh + ":\n" + f.srv.knownLine()} {
		if !strings.Contains(msg, s) {
			t.Errorf("message lacks %q:\n%s", s, msg)
		}
	}
	t.Logf("message: %s", msg)
	if b, _ := os.ReadFile(f.kh); len(b) != 0 {
		t.Errorf("known_hosts written without AcceptNew: %q", b)
	}
}

// AcceptNew (or StrictHostKeyChecking accept-new) learns an unknown key, in
// a file and directory it creates if needed; strict checking then passes.
func TestAcceptNewAppendsKey(t *testing.T) {
	f := newFixture(t)
	kh := filepath.Join(f.home, "new", "dir", "known_hosts")
	var logged []string
	cfg := *f.cfg
	cfg.KnownHostsFiles, cfg.AcceptNew = []string{kh}, true
	cfg.Logf = func(format string, a ...any) { logged = append(logged, fmt.Sprintf(format, a...)) }
	dial(t, f.srv.addr, &cfg).Close()
	b, err := os.ReadFile(kh)
	if err != nil || string(b) != f.srv.knownLine()+"\n" {
		t.Fatalf("known_hosts %q, %v; want %q", b, err, f.srv.knownLine())
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "added the host key of [127.0.0.1]:") {
		t.Errorf("notice %q", logged)
	}
	cfg.AcceptNew, cfg.Logf = false, nil
	dial(t, f.srv.addr, &cfg).Close()

	// the same through ssh_config, appending to a file without a final newline
	writeFile(t, kh, "# no newline at the end")
	cfgFile := filepath.Join(f.home, "cfg")
	writeFile(t, cfgFile, "Host *\n  StrictHostKeyChecking accept-new\n  UserKnownHostsFile "+kh+"\n")
	cfg = *f.cfg
	cfg.ConfigFile = cfgFile
	dial(t, f.srv.addr, &cfg).Close()
	if b, _ := os.ReadFile(kh); string(b) != "# no newline at the end\n"+f.srv.knownLine()+"\n" {
		t.Errorf("known_hosts %q", b)
	}

	// HashKnownHosts yes: the name is written hashed, and still matches
	writeFile(t, kh, "")
	writeFile(t, cfgFile, "Host *\n  StrictHostKeyChecking accept-new\n  HashKnownHosts yes\n  UserKnownHostsFile "+kh+"\n")
	dial(t, f.srv.addr, &cfg).Close()
	if b, _ := os.ReadFile(kh); !strings.HasPrefix(string(b), "|1|") || strings.Contains(string(b), "127.0.0.1") {
		t.Errorf("hashed known_hosts %q", b)
	}
	cfg.ConfigFile, cfg.KnownHostsFiles = "none", []string{kh}
	dial(t, f.srv.addr, &cfg).Close()
}

// A changed key is refused loudly, naming the file and line of the old key,
// even with AcceptNew.
func TestChangedHostKeyRefused(t *testing.T) {
	f := newFixture(t)
	old := newKey(t, "ed25519")
	writeFile(t, f.kh, "# header\n"+knownhosts.Line([]string{f.srv.addr}, old.pub())+"\n")
	for _, acceptNew := range []bool{false, true} {
		cfg := *f.cfg
		cfg.AcceptNew = acceptNew
		_, err := Dial(context.Background(), f.srv.addr, &cfg)
		var he *HostKeyError
		if !errors.As(err, &he) || !he.Changed() {
			t.Fatalf("AcceptNew=%v: %v; want a changed-key *HostKeyError", acceptNew, err)
		}
		for _, s := range []string{"HOST KEY CHANGED", f.kh + ":2", ssh.FingerprintSHA256(old.pub()), ssh.FingerprintSHA256(f.srv.hostKeys[0].pub())} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("message lacks %q:\n%v", s, err)
			}
		}
	}
	if b, _ := os.ReadFile(f.kh); strings.Count(string(b), "\n") != 2 {
		t.Errorf("known_hosts changed: %q", b)
	}
	if err := (&HostKeyError{Name: "[h]:2222", Key: old.pub(), Known: []knownhosts.KnownKey{{Filename: "/kh", Line: 1, Key: old.pub()}}}).Error(); !strings.Contains(err, "ssh-keygen -R '[h]:2222' -f /kh") {
		t.Errorf("removal hint: %s", err)
	}

	// a key marked @revoked is refused, even when listed as known
	writeFile(t, f.kh, f.srv.knownLine()+"\n@revoked * "+string(ssh.MarshalAuthorizedKey(f.srv.hostKeys[0].pub())))
	_, err := Dial(context.Background(), f.srv.addr, f.cfg)
	var he *HostKeyError
	if !errors.As(err, &he) || he.Revoked == nil || !strings.Contains(err.Error(), "REVOKED in "+f.kh+":2") {
		t.Errorf("revoked key: %v", err)
	}
}

// A server with ECDSA and Ed25519 host keys, of which known_hosts has only
// one: plain x/crypto/ssh negotiates ECDSA and sees a "changed" key; sshc
// asks for the type on record.
func TestHostKeyTypeFromKnownHosts(t *testing.T) {
	ec, ed := newKey(t, "ecdsa"), newKey(t, "ed25519")
	for i, known := range []testKey{ed, ec} {
		f := newFixture(t)
		srv := newTestServer(t, ec, ed)
		srv.authorize(f.key.pub())
		writeFile(t, f.kh, knownhosts.Line([]string{srv.addr}, known.pub())+"\n")
		dial(t, srv.addr, f.cfg).Close()

		if i == 0 { // known: Ed25519 only; the pitfall this avoids
			// unknown: the Ed25519 line is shown, as OpenSSH would record
			writeFile(t, f.kh, "")
			var he *HostKeyError
			if _, err := Dial(context.Background(), srv.addr, f.cfg); !errors.As(err, &he) || he.Key.Type() != ssh.KeyAlgoED25519 {
				t.Errorf("unknown host with ECDSA and Ed25519 keys: %v; want the Ed25519 line", err)
			}
			writeFile(t, f.kh, knownhosts.Line([]string{srv.addr}, known.pub())+"\n")

			cb, _ := knownhosts.New(f.kh)
			_, err := ssh.Dial("tcp", srv.addr, &ssh.ClientConfig{User: "u", HostKeyCallback: cb,
				Auth: []ssh.AuthMethod{ssh.PublicKeys(f.key.signer)}, Timeout: 5 * time.Second})
			if err == nil || !strings.Contains(err.Error(), "key mismatch") {
				t.Errorf("plain x/crypto/ssh: %v; expected a key mismatch", err)
			}
		}
	}
}

// lockedKey is a key file protected by a passphrase (slow to make: bcrypt).
type lockedKey struct {
	key testKey
	pem []byte
}

func (l lockedKey) write(t *testing.T, path string) {
	t.Helper()
	writeFile(t, path, string(l.pem))
	writeFile(t, path+".pub", string(ssh.MarshalAuthorizedKey(l.key.pub())))
}

func TestAuthentication(t *testing.T) {
	var locked lockedKey
	locked.key = newKey(t, "ed25519")
	dir := t.TempDir()
	locked.key.write(t, filepath.Join(dir, "k"), "secret")
	locked.pem, _ = os.ReadFile(filepath.Join(dir, "k"))

	t.Run("wrong key", func(t *testing.T) {
		f := newFixture(t)
		wrong := newKey(t, "ed25519").write(t, filepath.Join(f.home, "wrong"), "")
		cfg := *f.cfg
		cfg.IdentityFile = wrong
		_, err := Dial(context.Background(), f.srv.addr, &cfg)
		var ae *AuthError
		if !errors.As(err, &ae) || len(ae.Offered) != 1 {
			t.Fatalf("%v; want an *AuthError", err)
		}
		for _, s := range []string{"host " + f.srv.addr + ": ssh handshake: authentication as " + currentUser() + "@" + f.srv.addr + " failed", wrong + " (ssh-ed25519 SHA256:", "authorized_keys"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("message lacks %q:\n%v", s, err)
			}
		}
		t.Logf("message: %v", err)
	})
	t.Run("passphrase without agent", func(t *testing.T) {
		f := newFixture(t)
		key := filepath.Join(f.home, ".ssh", "id_ed25519")
		locked.write(t, key)
		f.srv.authorize(locked.key.pub())
		_, err := Dial(context.Background(), f.srv.addr, f.cfg)
		var ae *AuthError
		if !errors.As(err, &ae) || !strings.Contains(err.Error(), key+" is protected by a passphrase and no ssh-agent holds it") ||
			!strings.Contains(err.Error(), "ssh-add "+key) {
			t.Fatalf("%v; want a clear passphrase error", err)
		}
		if n := f.srv.handshakes.Load(); n != 0 {
			t.Errorf("connected %d times with nothing to offer", n)
		}
		t.Logf("message: %v", err)
	})
	t.Run("passphrase key held by the agent", func(t *testing.T) {
		f := newFixture(t)
		locked.write(t, filepath.Join(f.home, ".ssh", "id_ed25519"))
		f.srv.authorize(locked.key.pub())
		cfg := *f.cfg
		cfg.AgentSocket = startAgent(t, locked.key)
		dial(t, f.srv.addr, &cfg)
	})
	t.Run("agent first, from SSH_AUTH_SOCK", func(t *testing.T) {
		f := newFixture(t)
		os.Remove(filepath.Join(f.home, ".ssh", "id_ed25519"))
		t.Setenv("SSH_AUTH_SOCK", startAgent(t, f.key))
		cfg := *f.cfg
		cfg.AgentSocket = ""
		c := dial(t, f.srv.addr, &cfg)
		if out, err := c.Output(context.Background(), "echo ok"); err != nil || string(out) != "ok\n" {
			t.Errorf("%q %v", out, err)
		}
	})
	t.Run("IdentitiesOnly keeps other agent keys out", func(t *testing.T) {
		f := newFixture(t)
		wrong := newKey(t, "ed25519").write(t, filepath.Join(f.home, "wrong"), "")
		cfgFile := filepath.Join(f.home, "cfg")
		writeFile(t, cfgFile, "Host *\n  IdentitiesOnly yes\n  IdentityFile "+wrong+"\n")
		cfg := *f.cfg
		cfg.ConfigFile, cfg.AgentSocket = cfgFile, startAgent(t, f.key)
		var ae *AuthError
		if _, err := Dial(context.Background(), f.srv.addr, &cfg); !errors.As(err, &ae) || len(ae.Offered) != 1 {
			t.Errorf("%v; want an *AuthError offering only %s", err, wrong)
		}
	})
	t.Run("default key id_ecdsa", func(t *testing.T) {
		f := newFixture(t)
		os.Remove(filepath.Join(f.home, ".ssh", "id_ed25519"))
		k := newKey(t, "ecdsa")
		k.write(t, filepath.Join(f.home, ".ssh", "id_ecdsa"), "")
		f.srv.authorize(k.pub())
		dial(t, f.srv.addr, f.cfg)
	})
	t.Run("no key at all", func(t *testing.T) {
		f := newFixture(t)
		os.Remove(filepath.Join(f.home, ".ssh", "id_ed25519"))
		_, err := Dial(context.Background(), f.srv.addr, f.cfg)
		var ae *AuthError
		if !errors.As(err, &ae) || !strings.Contains(err.Error(), "no SSH key to log in as") || f.srv.handshakes.Load() != 0 {
			t.Errorf("%v; want a no-key *AuthError before connecting", err)
		}
	})
	t.Run("explicit key missing", func(t *testing.T) {
		f := newFixture(t)
		cfg := *f.cfg
		cfg.IdentityFile = filepath.Join(f.home, "nope")
		if _, err := Dial(context.Background(), f.srv.addr, &cfg); err == nil || !strings.Contains(err.Error(), "nope") {
			t.Errorf("%v; want an error naming the missing key", err)
		}
	})
}

// A server that accepts the TCP connection and says nothing: the handshake
// ends at the timeout, not minutes later; ctx cancels it sooner.
func TestHandshakeDeadline(t *testing.T) {
	f := newFixture(t)
	addr := silentListener(t)
	cfg := *f.cfg
	cfg.Timeout = 300 * time.Millisecond
	t0 := time.Now()
	_, err := Dial(context.Background(), addr, &cfg)
	el := time.Since(t0)
	if err == nil || !strings.Contains(err.Error(), "host "+addr+": ssh handshake with "+addr+": no answer within 300ms") {
		t.Errorf("%v", err)
	}
	if el < 300*time.Millisecond || el > 1300*time.Millisecond {
		t.Errorf("failed after %v, want about 300ms", el)
	}
	t.Logf("silent server: %v after %v", err, el.Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	cfg.Timeout = 10 * time.Second
	t0 = time.Now()
	if _, err := Dial(ctx, addr, &cfg); !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) > 1200*time.Millisecond {
		t.Errorf("with a 200ms context: %v after %v", err, time.Since(t0))
	}

	// a closed port: refused at once
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln.Addr().String()
	ln.Close()
	if _, err := Dial(context.Background(), closed, &cfg); err == nil || !strings.Contains(err.Error(), "host "+closed+": ssh connect to "+closed+": ") || !strings.Contains(err.Error(), "refused") {
		t.Errorf("closed port: %v", err)
	}
}

// Keepalives: a peer that stops answering is declared dead within
// (CountMax+1) intervals, Done fires and running sessions end with the
// reason; a healthy idle connection is left alone.
func TestKeepalive(t *testing.T) {
	f := newFixture(t)
	p := newFreezeProxy(t, f.srv.addr)
	writeFile(t, f.kh, knownhosts.Line([]string{p.addr}, f.srv.hostKeys[0].pub())+"\n")
	cfg := *f.cfg
	cfg.KeepaliveInterval, cfg.KeepaliveCountMax = 100*time.Millisecond, 3
	c := dial(t, p.addr, &cfg)

	time.Sleep(600 * time.Millisecond) // six keepalives answered
	select {
	case <-c.Done():
		t.Fatalf("healthy connection declared dead: %v", c.Err())
	default:
	}

	s, err := c.Start("cat")
	if err != nil {
		t.Fatal(err)
	}
	p.freeze(true)
	t0 := time.Now()
	select {
	case <-c.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("frozen peer not noticed within 3s")
	}
	el := time.Since(t0)
	if el > 400*time.Millisecond+time.Second {
		t.Errorf("noticed after %v, want about 400ms", el)
	}
	if err := c.Err(); err == nil || !strings.Contains(err.Error(), "host "+p.addr+": connection lost: no answer to keepalives") {
		t.Errorf("Err: %v", err)
	}
	werr := s.Wait()
	if !errors.Is(werr, c.Err()) {
		t.Errorf("session Wait: %v; want the connection's error", werr)
	}
	t.Logf("frozen peer noticed after %v: %v", el.Round(time.Millisecond), werr)

	// Frozen from the start: the handshake times out instead.
	cfg.Timeout = 300 * time.Millisecond
	if _, err := Dial(context.Background(), p.addr, &cfg); err == nil || !strings.Contains(err.Error(), "no answer within 300ms") {
		t.Errorf("dial through a frozen proxy: %v", err)
	}
}

// TestKeepaliveLateAnswerWhileDataFlows: a peer that answers keepalives
// late (as a loaded sshd busy with a transfer does) but keeps sending data
// is alive, as OpenSSH's ServerAliveInterval counts only silence; once it
// falls silent too, it is declared dead.
func TestKeepaliveLateAnswerWhileDataFlows(t *testing.T) {
	f := newFixture(t)
	f.srv.replyDelay.Store(int64(3 * time.Second))
	cfg := *f.cfg
	cfg.KeepaliveInterval, cfg.KeepaliveCountMax = 200*time.Millisecond, 3
	c := dial(t, f.srv.addr, &cfg)
	s, err := c.Start("cat")
	if err != nil {
		t.Fatal(err)
	}
	echoed := make(chan int, 1)
	go func() {
		n, _ := io.Copy(io.Discard, s.Stdout)
		echoed <- int(n)
	}()
	const lines = 150 // 1.5 s of traffic, five times the silence allowed
	for range lines {
		if _, err := s.Stdin.Write([]byte("tick\n")); err != nil {
			t.Fatalf("write while keepalive answers are late: %v (%v)", err, c.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Stdin.Close()
	if err := s.Wait(); err != nil {
		t.Fatalf("session while keepalive answers are late: %v", err)
	}
	if n := <-echoed; n != 5*lines {
		t.Fatalf("echoed %d bytes, want %d", n, 5*lines)
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a silent peer with late answers was not declared dead")
	}
	if err := c.Err(); err == nil || !strings.Contains(err.Error(), "no answer to keepalives and nothing received for") {
		t.Errorf("Err: %v", err)
	}
}

// The remote side closing the connection ends the client with a reason.
func TestRemoteClose(t *testing.T) {
	f := newFixture(t)
	c := dial(t, f.srv.addr, f.cfg)
	f.srv.closeConns()
	select {
	case <-c.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("remote close not noticed")
	}
	if err := c.Err(); err == nil || !strings.HasPrefix(err.Error(), "host "+f.srv.addr+": connection") {
		t.Errorf("Err: %v", err)
	}
}

// Copy puts a file in place with its mode, creating directories; "~/" is
// the remote home.
func TestCopyFile(t *testing.T) {
	f := newFixture(t)
	c := dial(t, f.srv.addr, f.cfg)
	data := make([]byte, 3<<20+17)
	rand.Read(data)
	src := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(src, data, 0o750); err != nil {
		t.Fatal(err)
	}
	os.Chmod(src, 0o750)
	dst := filepath.Join(t.TempDir(), "a b", "c'd", "prog")
	if err := c.CopyFile(context.Background(), src, dst); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("copied file differs (%d bytes, %v)", len(got), err)
	}
	if st, _ := os.Stat(dst); st.Mode().Perm() != 0o750 {
		t.Errorf("mode %v, want 0750", st.Mode().Perm())
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(dst), ".jiarun-copy.*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}

	home := t.TempDir()
	t.Setenv("HOME", home) // the test server's shells inherit it
	if err := c.Copy(context.Background(), strings.NewReader("hi"), "~/.cache/jiarun/x", 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(home, ".cache", "jiarun", "x")); err != nil || string(b) != "hi" {
		t.Errorf("~/ copy: %q %v", b, err)
	}
}

// twoFaced reads "good" until it is rewound, and "evil" after: the hash
// sent with the data does not match what arrives.
type twoFaced struct {
	r      *strings.Reader
	rewind int
}

func (t *twoFaced) Read(p []byte) (int, error) { return t.r.Read(p) }
func (t *twoFaced) Seek(off int64, whence int) (int64, error) {
	if t.rewind++; t.rewind == 1 {
		t.r = strings.NewReader("evil")
	}
	return t.r.Seek(off, whence)
}

// A transfer whose content does not match the hash never reaches dst.
func TestCopyVerifiesHash(t *testing.T) {
	f := newFixture(t)
	c := dial(t, f.srv.addr, f.cfg)
	dir := t.TempDir()
	dst := filepath.Join(dir, "prog")
	writeFile(t, dst, "old")
	err := c.Copy(context.Background(), &twoFaced{r: strings.NewReader("good")}, dst, 0o755)
	if err == nil || !strings.Contains(err.Error(), "sha256 mismatch") || !strings.HasPrefix(err.Error(), "host "+f.srv.addr+": copy to "+dst) {
		t.Fatalf("Copy: %v; want a sha256 mismatch", err)
	}
	t.Logf("message: %v", err)
	if b, _ := os.ReadFile(dst); string(b) != "old" {
		t.Errorf("dst changed to %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("files left: %v", ents)
	}
}

// ProxyJump through one and two jump hosts; a failing jump host is named.
func TestProxyJump(t *testing.T) {
	f := newFixture(t)
	j1, j2 := newTestServer(t), newTestServer(t)
	j1.authorize(f.key.pub())
	j2.authorize(f.key.pub())
	writeFile(t, f.kh, f.srv.knownLine()+"\n"+j1.knownLine()+"\n"+j2.knownLine()+"\n")
	silent := silentListener(t)
	_, silentPort, _ := net.SplitHostPort(silent)
	cfgFile := filepath.Join(f.home, "cfg")
	writeFile(t, cfgFile, fmt.Sprintf(`
Host target
  HostName 127.0.0.1
  Port %d
  ProxyJump j1
Host target2
  HostName 127.0.0.1
  Port %d
  ProxyJump j1,j2
Host viasilent
  HostName 127.0.0.1
  Port %d
  ProxyJump 127.0.0.1:%s
Host silentviaj1
  HostName 127.0.0.1
  Port %s
  ProxyJump j1
Host j1
  HostName 127.0.0.1
  Port %d
Host j2
  HostName 127.0.0.1
  Port %d
`, f.srv.port, f.srv.port, f.srv.port, silentPort, silentPort, j1.port, j2.port))
	cfg := *f.cfg
	cfg.ConfigFile = cfgFile

	c := dial(t, "target", &cfg)
	if out, err := c.Output(context.Background(), "echo via"); err != nil || string(out) != "via\n" {
		t.Fatalf("%q %v", out, err)
	}
	if j1.handshakes.Load() != 1 || j2.handshakes.Load() != 0 {
		t.Errorf("jump connections: j1 %d, j2 %d; want 1, 0", j1.handshakes.Load(), j2.handshakes.Load())
	}
	c.Close()
	if err := c.hops[0].Wait(); err == nil {
		t.Log("jump connection closed")
	}

	c2 := dial(t, "target2", &cfg)
	if out, err := c2.Output(context.Background(), "echo two"); err != nil || string(out) != "two\n" {
		t.Fatalf("%q %v", out, err)
	}
	if j1.handshakes.Load() != 2 || j2.handshakes.Load() != 1 || len(c2.hops) != 2 {
		t.Errorf("jump connections: j1 %d, j2 %d; want 2, 1", j1.handshakes.Load(), j2.handshakes.Load())
	}

	cfg.Timeout = 300 * time.Millisecond
	_, err := Dial(context.Background(), "viasilent", &cfg)
	if err == nil || !strings.Contains(err.Error(), "host viasilent: via jump host 127.0.0.1: ssh handshake with "+silent+": no answer within 300ms") {
		t.Errorf("silent jump host: %v", err)
	}
	// silent destination behind a jump host: the channel takes no deadline,
	// a timer closes it
	t0 := time.Now()
	_, err = Dial(context.Background(), "silentviaj1", &cfg)
	if err == nil || !strings.Contains(err.Error(), "host silentviaj1: ssh handshake with "+silent+": no answer within 300ms") || time.Since(t0) > 1300*time.Millisecond {
		t.Errorf("silent host behind a jump host: %v after %v", err, time.Since(t0))
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"plain/path-1.2": "plain/path-1.2",
		"":               "''",
		"a b":            "'a b'",
		"it's":           `'it'\''s'`,
		"$HOME":          "'$HOME'",
	} {
		if got := ShellQuote(in); got != want {
			t.Errorf("ShellQuote(%q) = %s, want %s", in, got, want)
		}
	}
	if got := RemotePath("~/a b"); got != `"$HOME"/'a b'` {
		t.Errorf("RemotePath: %s", got)
	}
}
