package launcher

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/jiarun/jia/launcher/sshc"
)

// Logging in to the hosts of the tree.
//
// Over SSH, a proxy logs in to its children itself: the child's SSH
// connection ends at the parent's proxy, which relays the child's frames.
// The login node stays the authority of every login, over jiarun's own
// link: the proxy asks it whether to trust a child's host key (checked
// against the user's known_hosts on the login node, learnt there with
// --ssh-accept-new) and asks it to sign the child's public-key
// authentication. No private key, agent socket or known_hosts file is
// needed on the hosts, and none is exposed there.
//
// This is agent forwarding narrowed down. An ssh-agent forwarded to a host
// signs anything, for any destination, for as long as the session lasts,
// for anyone who can reach its socket there (root on that host, say).
// jiarun's login node signs only
//   - for the hosts it planned below the proxy that asks (a proxy cannot
//     get a signature for a host outside its subtree),
//   - after that host's key was accepted against the login node's
//     known_hosts,
//   - a public-key user-authentication request (RFC 4252 §7) for the user
//     the login node's ssh configuration gives for that host, with one of
//     the keys it offered, at most once per key,
//   - during start-up only: once the whole tree is up it refuses.
//
// The alternative of the login node dialling every host itself through
// its parent's connection (direct-tcpip, as ProxyJump) keeps the same
// guarantees but leaves the login node with one SSH session, key exchange
// and link per host, which is what the tree is there to avoid.

// authRequest is a proxy's question to the login node.
type authRequest struct {
	Host string // the host being logged in to (its name in the host list)
	Op   string // "hostkey" or "sign"
	Key  []byte // hostkey: the key presented; sign: the public key to sign with
	Algo string `json:",omitempty"` // sign: the signature algorithm
	Data []byte `json:",omitempty"` // sign: the data to sign
}

// authReply is the login node's answer.
type authReply struct {
	Err string         `json:",omitempty"`
	Sig *ssh.Signature `json:",omitempty"`
}

// treeAuth answers the proxies' questions at the root.
type treeAuth struct {
	local *sshc.LocalAuthority
	mu    sync.Mutex
	hosts map[string]*authHost
	over  bool // start-up is over: refuse everything
}

// authHost is one host a proxy logs in to.
type authHost struct {
	target  *sshc.Target
	via     string   // the root's child whose subtree holds the host
	keys    [][]byte // the public keys offered for it
	hostKey []byte   // its key, once accepted
	signed  map[string]bool
}

func newTreeAuth(cfg *sshc.Config) *treeAuth {
	return &treeAuth{local: cfg.LocalAuthority(), hosts: map[string]*authHost{}}
}

// plan resolves host (dialled by a proxy below the root's child via) and
// returns how the proxy is to log in to it.
func (a *treeAuth) plan(cfg *sshc.Config, host, spec, via string) (*sshHop, error) {
	t, err := cfg.Resolve(spec)
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", host, err)
	}
	signers, err := a.local.Signers(t)
	if err != nil {
		return nil, fmt.Errorf("host %s: ssh auth: %w", host, err)
	}
	hop := &sshHop{HostName: t.HostName, Port: t.Port, User: t.User, Timeout: cfg.Timeout,
		HostKeyAlgorithms: a.local.HostKeyAlgorithms(t)}
	if hop.Timeout <= 0 {
		hop.Timeout = t.ConnectTimeout
	}
	if hop.Timeout <= 0 {
		hop.Timeout = sshc.DefaultTimeout
	}
	h := &authHost{target: t, via: via, signed: map[string]bool{}}
	for _, s := range signers {
		algos := signerAlgorithms(s)
		if algos == nil {
			continue // a certificate: not delegated
		}
		k := s.PublicKey().Marshal()
		hop.Keys = append(hop.Keys, delegatedKey{Key: k, Algorithms: algos})
		h.keys = append(h.keys, k)
	}
	if len(hop.Keys) == 0 {
		return nil, fmt.Errorf("host %s: ssh auth: no key that a proxy can log in with (certificates are not delegated)", host)
	}
	a.mu.Lock()
	a.hosts[host] = h
	a.mu.Unlock()
	return hop, nil
}

// signerAlgorithms are the signature algorithms s signs with, or nil for
// a certificate.
func signerAlgorithms(s ssh.Signer) []string {
	typ := s.PublicKey().Type()
	if strings.Contains(typ, "-cert-") {
		return nil
	}
	if m, ok := s.(ssh.MultiAlgorithmSigner); ok {
		return m.Algorithms()
	}
	if _, ok := s.(ssh.AlgorithmSigner); ok && typ == ssh.KeyAlgoRSA {
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
	}
	return []string{typ}
}

// finish ends start-up: every later question is refused, and the agent
// connections are closed.
func (a *treeAuth) finish() {
	a.mu.Lock()
	a.over = true
	a.mu.Unlock()
	a.local.Close()
}

// answer answers req, which came from the root's child via (or a proxy
// below it).
func (a *treeAuth) answer(via string, req authRequest) authReply {
	sig, err := a.decide(via, req)
	if err != nil {
		return authReply{Err: err.Error()}
	}
	return authReply{Sig: sig}
}

func (a *treeAuth) decide(via string, req authRequest) (*ssh.Signature, error) {
	a.mu.Lock()
	h := a.hosts[req.Host]
	over := a.over
	a.mu.Unlock()
	switch {
	case h == nil || h.via != via:
		return nil, fmt.Errorf("jiarun on the login node refuses: host %q is not one the proxy on %s starts", req.Host, via)
	case over:
		return nil, fmt.Errorf("jiarun on the login node refuses: start-up is over")
	}
	switch req.Op {
	case "hostkey":
		key, err := ssh.ParsePublicKey(req.Key)
		if err != nil {
			return nil, fmt.Errorf("host key: %w", err)
		}
		if err := a.local.CheckHostKey(h.target, key); err != nil {
			return nil, err
		}
		a.mu.Lock()
		h.hostKey = req.Key
		a.mu.Unlock()
		return nil, nil
	case "sign":
	default:
		return nil, fmt.Errorf("jiarun on the login node refuses: unknown request %q", req.Op)
	}
	a.mu.Lock()
	verified := h.hostKey != nil
	offered := slices.ContainsFunc(h.keys, func(k []byte) bool { return bytes.Equal(k, req.Key) })
	a.mu.Unlock()
	switch {
	case !verified:
		return nil, fmt.Errorf("jiarun on the login node refuses to sign for %s: its host key was not checked", req.Host)
	case !offered:
		return nil, fmt.Errorf("jiarun on the login node refuses to sign for %s with a key it did not offer", req.Host)
	}
	u, err := parseUserAuth(req.Data)
	if err != nil {
		return nil, fmt.Errorf("jiarun on the login node refuses to sign for %s: %w", req.Host, err)
	}
	switch {
	case u.user != h.target.User:
		return nil, fmt.Errorf("jiarun on the login node refuses to sign for %s: login as %q, not %q", req.Host, u.user, h.target.User)
	case u.service != "ssh-connection" || u.method != "publickey":
		return nil, fmt.Errorf("jiarun on the login node refuses to sign for %s: not a public-key login", req.Host)
	case !bytes.Equal(u.key, req.Key) || (req.Algo != "" && u.algo != req.Algo):
		return nil, fmt.Errorf("jiarun on the login node refuses to sign for %s: the request names another key", req.Host)
	}
	a.mu.Lock()
	already := h.signed[string(req.Key)]
	h.signed[string(req.Key)] = true
	a.mu.Unlock()
	if already {
		return nil, fmt.Errorf("jiarun on the login node refuses to sign for %s twice with one key", req.Host)
	}
	signers, err := a.local.Signers(h.target)
	if err != nil {
		return nil, err
	}
	for _, s := range signers {
		if !bytes.Equal(s.PublicKey().Marshal(), req.Key) {
			continue
		}
		if req.Algo != "" {
			if !slices.Contains(signerAlgorithms(s), req.Algo) {
				return nil, fmt.Errorf("jiarun on the login node: key %s does not sign with %s", ssh.FingerprintSHA256(s.PublicKey()), req.Algo)
			}
			if as, ok := s.(ssh.AlgorithmSigner); ok {
				return as.SignWithAlgorithm(rand.Reader, req.Data, req.Algo)
			}
		}
		return s.Sign(rand.Reader, req.Data)
	}
	return nil, fmt.Errorf("jiarun on the login node: the key offered for %s is no longer available", req.Host)
}

// userAuth is the data signed for a public-key login (RFC 4252 §7).
type userAuth struct {
	user, service, method, algo string
	key                         []byte
}

// parseUserAuth parses the data a client signs to log in with a public key:
// session id, SSH_MSG_USERAUTH_REQUEST, user, service, "publickey", TRUE,
// algorithm, key. Nothing may follow.
func parseUserAuth(b []byte) (userAuth, error) {
	var u userAuth
	bad := errors.New("not a public-key login request")
	str := func() ([]byte, bool) {
		if len(b) < 4 {
			return nil, false
		}
		n := binary.BigEndian.Uint32(b)
		if uint64(n) > uint64(len(b)-4) {
			return nil, false
		}
		s := b[4 : 4+n]
		b = b[4+n:]
		return s, true
	}
	if _, ok := str(); !ok { // session id
		return u, bad
	}
	if len(b) < 1 || b[0] != 50 { // SSH_MSG_USERAUTH_REQUEST
		return u, bad
	}
	b = b[1:]
	fields := make([][]byte, 3)
	for i := range fields {
		s, ok := str()
		if !ok {
			return u, bad
		}
		fields[i] = s
	}
	if len(b) < 1 || b[0] != 1 { // TRUE: with a signature
		return u, bad
	}
	b = b[1:]
	algo, ok1 := str()
	key, ok2 := str()
	if !ok1 || !ok2 || len(b) != 0 {
		return u, bad
	}
	u.user, u.service, u.method = string(fields[0]), string(fields[1]), string(fields[2])
	u.algo, u.key = string(algo), key
	return u, nil
}

// linkAuthority is a proxy's sshc.Authority for logging in to one child:
// the login node decides, over the link.
type linkAuthority struct {
	p    *proxy
	host string
	hop  *sshHop
}

func (a *linkAuthority) HostKeyAlgorithms(*sshc.Target) []string { return a.hop.HostKeyAlgorithms }

func (a *linkAuthority) CheckHostKey(_ *sshc.Target, key ssh.PublicKey) error {
	r, err := a.p.ask(authRequest{Host: a.host, Op: "hostkey", Key: key.Marshal()}, a.hop.Timeout)
	if err != nil {
		return err
	}
	if r.Err != "" {
		return errors.New(r.Err)
	}
	return nil
}

func (a *linkAuthority) Signers(*sshc.Target) ([]ssh.Signer, error) {
	var out []ssh.Signer
	for _, k := range a.hop.Keys {
		pub, err := ssh.ParsePublicKey(k.Key)
		if err != nil {
			return nil, fmt.Errorf("key from the login node: %w", err)
		}
		out = append(out, &remoteSigner{a: a, pub: pub, algos: k.Algorithms})
	}
	return out, nil
}

// remoteSigner signs by asking the login node.
type remoteSigner struct {
	a     *linkAuthority
	pub   ssh.PublicKey
	algos []string
}

func (s *remoteSigner) PublicKey() ssh.PublicKey { return s.pub }
func (s *remoteSigner) Algorithms() []string     { return s.algos }

func (s *remoteSigner) Sign(rand io.Reader, data []byte) (*ssh.Signature, error) {
	return s.SignWithAlgorithm(rand, data, "")
}

func (s *remoteSigner) SignWithAlgorithm(_ io.Reader, data []byte, algo string) (*ssh.Signature, error) {
	r, err := s.a.p.ask(authRequest{Host: s.a.host, Op: "sign", Key: s.pub.Marshal(), Algo: algo, Data: data}, s.a.hop.Timeout)
	if err != nil {
		return nil, err
	}
	if r.Err != "" {
		return nil, errors.New(r.Err)
	}
	if r.Sig == nil {
		return nil, errors.New("the login node sent no signature")
	}
	return r.Sig, nil
}

// askTimeout bounds a question to the login node when the hop has no
// timeout of its own.
const askTimeout = 10 * time.Second
