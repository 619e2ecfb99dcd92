package launcher

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/jiarun/jia/launcher/sshc"
)

// authFixture is a login node (a treeAuth with a key file and a
// known_hosts file) and a proxy below its child "nodeA", joined by a link.
type authFixture struct {
	auth     *treeAuth
	p        *proxy
	hostKeys map[string]ssh.Signer // the hosts' own keys
	user     string
}

func newAuthFixture(t *testing.T) *authFixture {
	t.Helper()
	dir := t.TempDir()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "id_ed25519")
	os.WriteFile(keyFile, pem.EncodeToMemory(block), 0o600)
	f := &authFixture{hostKeys: map[string]ssh.Signer{}}
	var kh []string
	for _, h := range []string{"nodeC", "nodeD", "nodeE", "nodeF"} {
		_, hk, _ := ed25519.GenerateKey(rand.Reader)
		s, _ := ssh.NewSignerFromKey(hk)
		f.hostKeys[h] = s
		if h != "nodeF" { // nodeF is not in known_hosts
			kh = append(kh, knownhosts.Line([]string{h}, s.PublicKey()))
		}
	}
	khFile := filepath.Join(dir, "known_hosts")
	os.WriteFile(khFile, []byte(strings.Join(kh, "\n")+"\n"), 0o600)
	cfg := &sshc.Config{ConfigFile: "none", IdentityFile: keyFile, KnownHostsFiles: []string{khFile},
		AgentSocket: "none", HomeDir: dir}
	f.auth = newTreeAuth(cfg)
	t.Cleanup(f.auth.finish)
	for h, via := range map[string]string{"nodeC": "nodeA", "nodeD": "nodeB", "nodeE": "nodeA", "nodeF": "nodeA"} {
		hop, err := f.auth.plan(cfg, h, h, via)
		if err != nil {
			t.Fatal(err)
		}
		if len(hop.Keys) != 1 || hop.HostName != h || hop.Port != 22 {
			t.Fatalf("plan %s: %+v", h, hop)
		}
		f.user = hop.User
	}

	// The link: the proxy's questions go to the root's answer for nodeA.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	up, down := io.Pipe()
	t.Cleanup(func() { down.Close() })
	f.p = &proxy{w: newLinkWriter(down), ctx: ctx, asks: map[uint64]pendingAsk{}}
	go func() {
		r := bufio.NewReader(up)
		for {
			typ, body, err := readLinkFrame(r)
			if err != nil {
				return
			}
			if typ != linkAuthAsk {
				t.Errorf("frame %#x on the link", typ)
				continue
			}
			v, rest, _ := payload(body, 1)
			var req authRequest
			json.Unmarshal(rest, &req)
			b, _ := json.Marshal(f.auth.answer("nodeA", req))
			f.p.authReply(append(uv(v[0]), b...))
		}
	}()
	return f
}

// authority is the proxy's authority for logging in to host.
func (f *authFixture) authority(t *testing.T, host string) (*linkAuthority, ssh.Signer) {
	t.Helper()
	f.auth.mu.Lock()
	h := f.auth.hosts[host]
	f.auth.mu.Unlock()
	hop := &sshHop{User: h.target.User, Keys: []delegatedKey{{Key: h.keys[0], Algorithms: []string{ssh.KeyAlgoED25519}}}}
	a := &linkAuthority{p: f.p, host: host, hop: hop}
	signers, err := a.Signers(nil)
	if err != nil || len(signers) != 1 {
		t.Fatalf("signers: %v %v", signers, err)
	}
	return a, signers[0]
}

// userAuthData is what a client signs to log in (RFC 4252 §7).
func userAuthData(user, service string, key ssh.PublicKey) []byte {
	var b []byte
	str := func(s []byte) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	str([]byte("session-id-0123456789"))
	b = append(b, 50)
	str([]byte(user))
	str([]byte(service))
	str([]byte("publickey"))
	b = append(b, 1)
	str([]byte(key.Type()))
	str(key.Marshal())
	return b
}

func TestTreeAuthSignsOnceAfterTheHostKey(t *testing.T) {
	f := newAuthFixture(t)
	a, signer := f.authority(t, "nodeC")
	data := userAuthData(f.user, "ssh-connection", signer.PublicKey())
	if _, err := signer.Sign(rand.Reader, data); err == nil || !strings.Contains(err.Error(), "host key was not checked") {
		t.Fatalf("signed before the host key was checked: %v", err)
	}
	if err := a.CheckHostKey(nil, f.hostKeys["nodeD"].PublicKey()); err == nil || !strings.Contains(err.Error(), "HOST KEY CHANGED") {
		t.Fatalf("another host's key accepted: %v", err)
	}
	if err := a.CheckHostKey(nil, f.hostKeys["nodeC"].PublicKey()); err != nil {
		t.Fatalf("known host key refused: %v", err)
	}
	sig, err := signer.Sign(rand.Reader, data)
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	if err := signer.PublicKey().Verify(data, sig); err != nil {
		t.Fatalf("the login node's signature does not verify: %v", err)
	}
	if _, err := signer.Sign(rand.Reader, data); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("signed twice: %v", err)
	}
}

func TestTreeAuthRefusals(t *testing.T) {
	f := newAuthFixture(t)
	a, signer := f.authority(t, "nodeE")
	if err := a.CheckHostKey(nil, f.hostKeys["nodeE"].PublicKey()); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"another user":        userAuthData("mallory", "ssh-connection", signer.PublicKey()),
		"another service":     userAuthData(f.user, "ssh-userauth", signer.PublicKey()),
		"not a login request": []byte("please sign this"),
		"trailing bytes":      append(userAuthData(f.user, "ssh-connection", signer.PublicKey()), 0),
	} {
		if _, err := signer.Sign(rand.Reader, data); err == nil || !strings.Contains(err.Error(), "refuses") {
			t.Errorf("%s: signed (%v)", name, err)
		}
	}

	// nodeD is below nodeB: the proxy below nodeA gets nothing for it.
	d, dsigner := f.authority(t, "nodeD")
	if err := d.CheckHostKey(nil, f.hostKeys["nodeD"].PublicKey()); err == nil || !strings.Contains(err.Error(), "not one the proxy on nodeA starts") {
		t.Fatalf("host of another subtree: %v", err)
	}
	if _, err := dsigner.Sign(rand.Reader, userAuthData(f.user, "ssh-connection", dsigner.PublicKey())); err == nil {
		t.Fatal("signed for a host of another subtree")
	}

	// An unknown host key is refused with the line to add on the login node.
	u, _ := f.authority(t, "nodeF")
	if err := u.CheckHostKey(nil, f.hostKeys["nodeF"].PublicKey()); err == nil || !strings.Contains(err.Error(), "nodeF ssh-ed25519 AAAA") {
		t.Fatalf("unknown host key: %v", err)
	}

	// Once start-up is over, nothing more.
	f.auth.finish()
	if err := a.CheckHostKey(nil, f.hostKeys["nodeE"].PublicKey()); err == nil || !strings.Contains(err.Error(), "start-up is over") {
		t.Fatalf("after start-up: %v", err)
	}
}

func TestParseUserAuth(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	s, _ := ssh.NewSignerFromKey(priv)
	u, err := parseUserAuth(userAuthData("alice", "ssh-connection", s.PublicKey()))
	if err != nil || u.user != "alice" || u.service != "ssh-connection" || u.method != "publickey" ||
		u.algo != ssh.KeyAlgoED25519 || string(u.key) != string(s.PublicKey().Marshal()) {
		t.Fatalf("%+v %v", u, err)
	}
	full := userAuthData("alice", "ssh-connection", s.PublicKey())
	for n := range len(full) {
		if _, err := parseUserAuth(full[:n]); err == nil {
			t.Fatalf("truncated to %d bytes: accepted", n)
		}
	}
}
