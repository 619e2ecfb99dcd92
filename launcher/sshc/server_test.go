package sshc

// An in-process SSH server on 127.0.0.1 for the tests that need no root:
// public-key auth, exec sessions run with the local sh, keepalive replies
// (failure, as OpenSSH answers), direct-tcpip to 127.0.0.1 (for ProxyJump),
// and signal requests ignored (as OpenSSH does for root). A freezeProxy in
// front of it stands for a host whose processes are stopped.

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
)

// testKey is a generated key pair.
type testKey struct {
	priv   any // ed25519.PrivateKey or *ecdsa.PrivateKey
	signer ssh.Signer
}

func (k testKey) pub() ssh.PublicKey { return k.signer.PublicKey() }

func newKey(t testing.TB, typ string) testKey {
	t.Helper()
	var priv any
	var err error
	switch typ {
	case "ed25519":
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	case "ecdsa":
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	default:
		t.Fatalf("key type %s", typ)
	}
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return testKey{priv: priv, signer: s}
}

// writeKey writes the private key (OpenSSH format, encrypted when
// passphrase is set) and its .pub to path.
func (k testKey) write(t testing.TB, path, passphrase string) string {
	t.Helper()
	var b *pem.Block
	var err error
	if passphrase == "" {
		b, err = ssh.MarshalPrivateKey(k.priv, "test")
	} else {
		b, err = ssh.MarshalPrivateKeyWithPassphrase(k.priv, "test", []byte(passphrase))
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(b), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".pub", ssh.MarshalAuthorizedKey(k.pub()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

type testServer struct {
	addr       string
	port       int
	hostKeys   []testKey
	handshakes atomic.Int32 // connections accepted
	replyDelay atomic.Int64 // how late global requests (keepalives) are answered, ns
	ln         net.Listener

	mu         sync.Mutex
	authorized []ssh.PublicKey
	conns      []net.Conn
}

// newTestServer starts a server with one ed25519 host key, or the given ones.
func newTestServer(t testing.TB, hostKeys ...testKey) *testServer {
	t.Helper()
	if len(hostKeys) == 0 {
		hostKeys = []testKey{newKey(t, "ed25519")}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{addr: ln.Addr().String(), port: ln.Addr().(*net.TCPAddr).Port, hostKeys: hostKeys, ln: ln}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			for _, k := range s.authorized {
				if string(k.Marshal()) == string(key.Marshal()) {
					return nil, nil
				}
			}
			return nil, errors.New("not authorized")
		},
	}
	for _, k := range hostKeys {
		cfg.AddHostKey(k.signer)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.handshakes.Add(1)
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			wg.Go(func() { s.serve(c, cfg) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.closeConns()
		wg.Wait()
	})
	return s
}

func (s *testServer) authorize(k ssh.PublicKey) {
	s.mu.Lock()
	s.authorized = append(s.authorized, k)
	s.mu.Unlock()
}

func (s *testServer) closeConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
}

// knownLine is the known_hosts line for the server's first host key.
func (s *testServer) knownLine() string {
	return knownhosts.Line([]string{s.addr}, s.hostKeys[0].pub())
}

func (s *testServer) serve(c net.Conn, cfg *ssh.ServerConfig) {
	sconn, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		c.Close()
		return
	}
	defer sconn.Close()
	go func() {
		for r := range reqs {
			if !r.WantReply {
				continue
			}
			if d := time.Duration(s.replyDelay.Load()); d > 0 {
				time.AfterFunc(d, func() { r.Reply(false, nil) })
				continue
			}
			r.Reply(false, nil) // OpenSSH answers keepalive@openssh.com with failure
		}
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	for nc := range chans {
		switch nc.ChannelType() {
		case "session":
			ch, creqs, err := nc.Accept()
			if err != nil {
				continue
			}
			wg.Go(func() { serveSession(ch, creqs) })
		case "direct-tcpip":
			var p struct {
				Host     string
				Port     uint32
				OrigHost string
				OrigPort uint32
			}
			if ssh.Unmarshal(nc.ExtraData(), &p) != nil || p.Host != "127.0.0.1" {
				nc.Reject(ssh.Prohibited, "only 127.0.0.1")
				continue
			}
			tc, err := net.Dial("tcp", net.JoinHostPort(p.Host, strconv.Itoa(int(p.Port))))
			if err != nil {
				nc.Reject(ssh.ConnectionFailed, err.Error())
				continue
			}
			ch, creqs, err := nc.Accept()
			if err != nil {
				tc.Close()
				continue
			}
			go ssh.DiscardRequests(creqs)
			wg.Go(func() {
				go func() { io.Copy(ch, tc); ch.CloseWrite() }()
				io.Copy(tc, ch)
				tc.Close()
				ch.Close()
			})
		default:
			nc.Reject(ssh.UnknownChannelType, "no")
		}
	}
}

func serveSession(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	for r := range reqs {
		switch r.Type {
		case "exec":
			var p struct{ Cmd string }
			if ssh.Unmarshal(r.Payload, &p) != nil {
				r.Reply(false, nil)
				continue
			}
			r.Reply(true, nil)
			go ssh.DiscardRequests(reqs) // signal requests are ignored, as sshd does for root
			cmd := exec.Command("sh", "-c", p.Cmd)
			stdin, _ := cmd.StdinPipe()
			cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
			cmd.WaitDelay = 500 * time.Millisecond // background children may hold stdout
			status := uint32(127)
			if cmd.Start() == nil {
				go func() { io.Copy(stdin, ch); stdin.Close() }()
				err := cmd.Wait()
				status = 0
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					status = uint32(ee.ExitCode())
				}
			}
			st := make([]byte, 4)
			binary.BigEndian.PutUint32(st, status)
			ch.SendRequest("exit-status", false, st)
			return
		default:
			if r.WantReply {
				r.Reply(r.Type == "env", nil)
			}
		}
	}
}

// freezeProxy forwards TCP connections to target; Freeze makes it stop
// passing bytes in both directions while keeping the connections open, as
// a host whose processes are stopped does.
type freezeProxy struct {
	addr   string
	ln     net.Listener
	mu     sync.Mutex
	cond   *sync.Cond
	frozen bool
	done   bool
	conns  []net.Conn
}

func newFreezeProxy(t testing.TB, target string) *freezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezeProxy{addr: ln.Addr().String(), ln: ln}
	p.cond = sync.NewCond(&p.mu)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			wg.Go(func() { p.pipe(u, c) })
			wg.Go(func() { p.pipe(c, u) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		p.done, p.frozen = true, false
		for _, c := range p.conns {
			c.Close()
		}
		p.cond.Broadcast()
		p.mu.Unlock()
		wg.Wait()
	})
	return p
}

func (p *freezeProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		for p.frozen && !p.done {
			p.cond.Wait()
		}
		p.mu.Unlock()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *freezeProxy) freeze(on bool) {
	p.mu.Lock()
	p.frozen = on
	p.cond.Broadcast()
	p.mu.Unlock()
}

// silentListener accepts connections and never says anything.
func silentListener(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// startAgent serves an ssh-agent holding keys on a unix socket.
func startAgent(t testing.TB, keys ...testKey) string {
	t.Helper()
	kr := agent.NewKeyring()
	for _, k := range keys {
		if err := kr.Add(agent.AddedKey{PrivateKey: k.priv, Comment: "agent-test-key"}); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := os.MkdirTemp("", "sshc-agent")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { agent.ServeAgent(kr, c); c.Close() })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		os.RemoveAll(dir)
	})
	return sock
}
