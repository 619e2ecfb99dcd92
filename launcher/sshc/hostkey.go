package sshc

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// HostKeyError is returned when a host's key is not trusted: the host is not
// in known_hosts (Known is empty), or it is there with a different key (the
// key changed: Known lists the recorded keys with their file and line), or
// the key is revoked.
type HostKeyError struct {
	Name    string                // the name looked up, e.g. "10.77.0.11" or "[127.0.0.1]:2222"
	Key     ssh.PublicKey         // the key the server presented
	Files   []string              // the known_hosts files consulted (those that exist)
	AddTo   string                // the known_hosts file a new key belongs in
	Known   []knownhosts.KnownKey // recorded keys of Name (a changed key)
	Revoked *knownhosts.KnownKey  // set when Key is marked @revoked
}

// Line is the known_hosts line that trusts the presented key, for example
// "10.77.0.11 ssh-ed25519 AAAAC3Nza...".
func (e *HostKeyError) Line() string { return knownhosts.Line([]string{e.Name}, e.Key) }

// Changed reports whether known_hosts has a different key for the host.
func (e *HostKeyError) Changed() bool { return len(e.Known) > 0 }

func (e *HostKeyError) Error() string {
	fp := e.Key.Type() + " " + ssh.FingerprintSHA256(e.Key)
	switch {
	case e.Revoked != nil:
		return fmt.Sprintf("host key of %s (%s) is REVOKED in %s:%d; refusing to connect",
			e.Name, fp, e.Revoked.Filename, e.Revoked.Line)
	case e.Changed():
		var b strings.Builder
		fmt.Fprintf(&b, "HOST KEY CHANGED for %s: the server offered %s, but known_hosts has", e.Name, fp)
		for i, k := range e.Known {
			if i > 0 {
				b.WriteString(" and")
			}
			fmt.Fprintf(&b, " %s %s at %s:%d", k.Key.Type(), ssh.FingerprintSHA256(k.Key), k.Filename, k.Line)
		}
		fmt.Fprintf(&b, ". Someone may be intercepting the connection, or the host was reinstalled; refusing to connect."+
			" If the new key is right, remove the old line (ssh-keygen -R %s -f %s) and connect again.",
			ShellQuote(e.Name), ShellQuote(e.Known[0].Filename))
		return b.String()
	default:
		where := "no known_hosts file exists"
		if len(e.Files) > 0 {
			where = "not in " + strings.Join(e.Files, ", ")
		}
		return fmt.Sprintf("host key of %s is not known (%s; %s); to trust it, add this line to %s:\n%s",
			e.Name, fp, where, e.AddTo, e.Line())
	}
}

// knownHostsMu serializes appends to known_hosts files within the process.
var knownHostsMu sync.Mutex

// probeKey is a key that is in no known_hosts file: asking for it lists the
// keys recorded for a host.
var probeKey = sync.OnceValue(func() ssh.PublicKey {
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		panic(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		panic(err)
	}
	return k
})

// hostKeyChecker checks one target's host key against its known_hosts files.
type hostKeyChecker struct {
	t     *Target
	files []string // those of t.KnownHostsFiles that exist
	cb    ssh.HostKeyCallback
	logf  func(string, ...any)
	err   *HostKeyError // set when the check refused the key
}

func newHostKeyChecker(t *Target, logf func(string, ...any)) (*hostKeyChecker, error) {
	h := &hostKeyChecker{t: t, logf: logf}
	for _, f := range t.KnownHostsFiles {
		if _, err := os.Stat(f); err == nil {
			h.files = append(h.files, f)
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("known_hosts: %w", err)
		}
	}
	if len(h.files) > 0 {
		cb, err := knownhosts.New(h.files...)
		if err != nil {
			return nil, fmt.Errorf("known_hosts: %w", err)
		}
		h.cb = cb
	}
	return h, nil
}

// lookupAddr is the address given to the knownhosts callback: it splits it
// back into host and port and normalizes it to KnownHostsName.
func (h *hostKeyChecker) lookupAddr() string {
	name := h.t.HostName
	if h.t.HostKeyAlias != "" {
		name = h.t.HostKeyAlias
	}
	return net.JoinHostPort(name, fmt.Sprint(h.t.Port))
}

// openSSHHostKeyOrder is OpenSSH's preference among plain host keys, used
// for hosts not in known_hosts, so that the key learnt (or the line shown)
// is the one ssh would record. (x/crypto/ssh prefers ECDSA.)
var openSSHHostKeyOrder = []string{
	ssh.KeyAlgoED25519,
	ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521,
	ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256,
}

// algorithms returns the host key algorithms to offer. For a host in
// known_hosts, those of its recorded keys: a server with several host keys
// then shows the one we know (x/crypto prefers ECDSA to Ed25519, and a
// server offering both would look like a changed key). For an unknown host,
// OpenSSH's order, or x/crypto's (certificates first) when a known_hosts
// file has @cert-authority lines.
func (h *hostKeyChecker) algorithms() []string {
	if h.cb == nil {
		return openSSHHostKeyOrder
	}
	var ke *knownhosts.KeyError
	if err := h.cb(h.lookupAddr(), &net.TCPAddr{}, probeKey()); !errors.As(err, &ke) {
		return nil
	}
	if len(ke.Want) == 0 {
		for _, f := range h.files {
			if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, []byte("@cert-authority")) {
				return nil
			}
		}
		return openSSHHostKeyOrder
	}
	var algos []string
	add := func(a ...string) {
		for _, x := range a {
			if !slices.Contains(algos, x) {
				algos = append(algos, x)
			}
		}
	}
	for _, k := range ke.Want {
		switch t := k.Key.Type(); t {
		case ssh.KeyAlgoRSA:
			add(ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA)
		default:
			add(t)
		}
	}
	return algos
}

// check is the ssh.HostKeyCallback.
func (h *hostKeyChecker) check(_ string, remote net.Addr, key ssh.PublicKey) error {
	e := &HostKeyError{Name: h.t.KnownHostsName(), Key: key, Files: h.files, AddTo: "~/.ssh/known_hosts"}
	if len(h.t.KnownHostsFiles) > 0 {
		e.AddTo = h.t.KnownHostsFiles[0]
	}
	if h.cb != nil {
		err := h.cb(h.lookupAddr(), remote, key)
		if err == nil {
			return nil
		}
		var ke *knownhosts.KeyError
		var re *knownhosts.RevokedError
		switch {
		case errors.As(err, &re):
			e.Revoked = &re.Revoked
			h.err = e
			return e
		case errors.As(err, &ke):
			e.Known = ke.Want
		default:
			return fmt.Errorf("known_hosts: %w", err)
		}
	}
	if e.Changed() || !h.t.AcceptNew {
		h.err = e
		return e
	}
	line := e.Line()
	if h.t.HashKnownHosts {
		line = knownhosts.Line([]string{knownhosts.HashHostname(e.Name)}, key)
	}
	if err := addKnownHost(e.AddTo, line); err != nil {
		return fmt.Errorf("adding the key of %s to known_hosts: %w", e.Name, err)
	}
	if h.logf != nil {
		h.logf("added the host key of %s (%s %s) to %s", e.Name, key.Type(), ssh.FingerprintSHA256(key), e.AddTo)
	}
	return nil
}

// addKnownHost appends line to the known_hosts file, creating it (and its
// directory) when needed.
func addKnownHost(file, line string) error {
	knownHostsMu.Lock()
	defer knownHostsMu.Unlock()
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	// Start on a new line if the file does not end with one.
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, st.Size()-1); err == nil && last[0] != '\n' {
			line = "\n" + line
		}
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
