package sshc

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
)

// Authority takes the decisions of a login that need the user's files:
// whether to trust a host's key, and which keys to offer. By default Dial
// takes them from this machine (see [LocalAuthority]). jiarun's proxies,
// which log in to further hosts on behalf of the login node, use one that
// asks the login node over jiarun's own link, so that neither private keys
// nor known_hosts files are needed on the hosts, and no ssh-agent socket is
// exposed there.
type Authority interface {
	// HostKeyAlgorithms are the host key algorithms to negotiate with t, in
	// order of preference; nil leaves the choice to x/crypto/ssh.
	HostKeyAlgorithms(t *Target) []string
	// CheckHostKey accepts key as t's host key (nil) or refuses it.
	CheckHostKey(t *Target, key ssh.PublicKey) error
	// Signers are the keys to offer to t, in order.
	Signers(t *Target) ([]ssh.Signer, error)
}

// LocalAuthority is the Authority Dial uses when Config.Authority is nil:
// the known_hosts files, ssh-agent and key files that the Config names for
// each target. It keeps the credentials it loads (and so its ssh-agent
// connections) until Close. It is safe for concurrent use.
type LocalAuthority struct {
	cfg   *Config
	mu    sync.Mutex
	creds map[string]*credentials // by the target's identity settings
}

// LocalAuthority returns the authority of this machine's files as c
// configures them.
func (c *Config) LocalAuthority() *LocalAuthority {
	if c == nil {
		c = &Config{}
	}
	return &LocalAuthority{cfg: c, creds: map[string]*credentials{}}
}

// HostKeyAlgorithms returns the algorithms of the keys known_hosts records
// for t (OpenSSH's order when it has none).
func (a *LocalAuthority) HostKeyAlgorithms(t *Target) []string {
	h, err := newHostKeyChecker(t, a.cfg.Logf)
	if err != nil {
		return nil
	}
	return h.algorithms()
}

// CheckHostKey checks key against t's known_hosts files, as Dial does,
// adding it when t accepts new keys. A refusal is a *HostKeyError.
func (a *LocalAuthority) CheckHostKey(t *Target, key ssh.PublicKey) error {
	h, err := newHostKeyChecker(t, a.cfg.Logf)
	if err != nil {
		return err
	}
	err = h.check("", &net.TCPAddr{}, key)
	if h.err != nil {
		return h.err
	}
	return err
}

// Signers returns the keys Dial would offer to t: the agent's, then the
// key files'. An *AuthError says why there is none.
func (a *LocalAuthority) Signers(t *Target) ([]ssh.Signer, error) {
	id := strings.Join(t.IdentityFiles, "\x00") + "\x00" + strconv.FormatBool(t.IdentitiesOnly) +
		strconv.FormatBool(t.IdentitiesExplicit)
	a.mu.Lock()
	defer a.mu.Unlock()
	if cr := a.creds[id]; cr != nil {
		return cr.signers, nil
	}
	cr, err := loadCredentials(a.cfg, t)
	if err != nil {
		return nil, err
	}
	a.creds[id] = cr
	return cr.signers, nil
}

// Close releases the credentials: the ssh-agent connections. Signers
// obtained from the agent stop working.
func (a *LocalAuthority) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, cr := range a.creds {
		cr.Close()
		delete(a.creds, id)
	}
}

// login is what one handshake needs: the keys to offer, the host key
// check, and what to say when either fails.
type login struct {
	signers []ssh.Signer
	algos   []string
	check   ssh.HostKeyCallback
	refused error // set when check refused the host key
	authErr func(err error) error
	close   func()
}

// newLogin prepares the login to t, from c.Authority or this machine's
// files.
func (c *Config) newLogin(t *Target) (*login, error) {
	lg := &login{}
	if a := c.Authority; a != nil {
		signers, err := a.Signers(t)
		if err != nil {
			return nil, fmt.Errorf("ssh auth: %w", err)
		}
		offered := make([]string, len(signers))
		for i, s := range signers {
			offered[i] = describeKey(s.PublicKey())
		}
		lg.signers, lg.algos = signers, a.HostKeyAlgorithms(t)
		lg.check = func(_ string, _ net.Addr, key ssh.PublicKey) error {
			err := a.CheckHostKey(t, key)
			if err != nil {
				lg.refused = err
			}
			return err
		}
		lg.authErr = func(err error) error {
			return &AuthError{User: t.User, Addr: t.Addr(), Offered: offered, Err: err}
		}
		lg.close = func() {}
		return lg, nil
	}
	checker, err := newHostKeyChecker(t, c.Logf)
	if err != nil {
		return nil, err
	}
	creds, err := loadCredentials(c, t)
	if err != nil {
		return nil, fmt.Errorf("ssh auth: %w", err)
	}
	lg.signers, lg.algos = creds.signers, checker.algorithms()
	lg.check = func(host string, remote net.Addr, key ssh.PublicKey) error {
		err := checker.check(host, remote, key)
		if checker.err != nil {
			lg.refused = checker.err
		}
		return err
	}
	lg.authErr = func(err error) error { return creds.authError(t, err) }
	lg.close = creds.Close
	return lg, nil
}
