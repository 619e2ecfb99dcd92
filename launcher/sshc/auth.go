package sshc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// AuthError is returned when the server accepted none of the keys offered,
// or when there is no key to offer at all (Offered is empty).
type AuthError struct {
	User    string
	Addr    string   // host:port
	Offered []string // what was offered: "agent: TYPE FINGERPRINT COMMENT" or "FILE (TYPE FINGERPRINT)"
	Locked  []string // key files skipped: protected by a passphrase, not in the agent
	Notes   []string // other keys skipped, and why
	Err     error    // from x/crypto/ssh, nil when nothing was offered
}

func (e *AuthError) Error() string {
	var b strings.Builder
	if len(e.Offered) == 0 {
		fmt.Fprintf(&b, "no SSH key to log in as %s@%s", e.User, e.Addr)
	} else {
		fmt.Fprintf(&b, "authentication as %s@%s failed: the server accepted none of the keys offered (%s)",
			e.User, e.Addr, strings.Join(e.Offered, "; "))
	}
	for _, f := range e.Locked {
		fmt.Fprintf(&b, "; %s is protected by a passphrase and no ssh-agent holds it: start ssh-agent and run ssh-add %s (jiarun never asks for passphrases)", f, f)
	}
	if len(e.Notes) > 0 {
		fmt.Fprintf(&b, "; %s", strings.Join(e.Notes, "; "))
	}
	if len(e.Offered) > 0 {
		b.WriteString("; is the public key in the remote ~/.ssh/authorized_keys?")
	}
	if e.Err != nil {
		fmt.Fprintf(&b, " (%v)", e.Err)
	}
	return b.String()
}

func (e *AuthError) Unwrap() error { return e.Err }

// credentials are the signers for one target, in the order they are offered.
type credentials struct {
	signers []ssh.Signer
	offered []string
	locked  []string
	notes   []string
	agent   io.Closer // the agent connection, closed after the handshake
}

func (c *credentials) Close() {
	if c.agent != nil {
		c.agent.Close()
	}
}

// loadCredentials collects the agent's keys first, then the target's key
// files. A key file protected by a passphrase is used through the agent when
// the agent holds it, and reported otherwise: there is nobody to type a
// passphrase to.
func loadCredentials(cfg *Config, t *Target) (*credentials, error) {
	cr := &credentials{}
	var agentSigners []ssh.Signer
	sock := cfg.AgentSocket
	if sock == "" {
		sock = os.Getenv("SSH_AUTH_SOCK")
	}
	if sock != "" && sock != "none" {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			cr.notes = append(cr.notes, fmt.Sprintf("ssh-agent at %s: %v", sock, err))
		} else {
			cr.agent = conn
			if agentSigners, err = agent.NewClient(conn).Signers(); err != nil {
				cr.notes = append(cr.notes, fmt.Sprintf("ssh-agent at %s: %v", sock, err))
			}
		}
	}

	// Key files: public keys (to match agent keys with IdentitiesOnly) and signers.
	var filePubs []ssh.PublicKey
	var fileSigners []ssh.Signer
	var fileNames []string
	for _, f := range t.IdentityFiles {
		pem, err := os.ReadFile(f)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && !t.IdentitiesExplicit {
				continue // a default key the user does not have
			}
			cr.Close()
			return nil, fmt.Errorf("ssh key: %w", err)
		}
		signer, err := ssh.ParsePrivateKey(pem)
		var pm *ssh.PassphraseMissingError
		switch {
		case errors.As(err, &pm):
			pub := pm.PublicKey
			if pub == nil {
				pub = readPublicKey(f + ".pub")
			}
			if pub != nil && hasKey(agentSigners, pub) {
				filePubs = append(filePubs, pub) // the agent offers it
				continue
			}
			cr.locked = append(cr.locked, f)
		case err != nil:
			if t.IdentitiesExplicit {
				cr.Close()
				return nil, fmt.Errorf("ssh key %s: %w", f, err)
			}
			cr.notes = append(cr.notes, fmt.Sprintf("%s skipped: %v", f, err))
		default:
			filePubs = append(filePubs, signer.PublicKey())
			fileSigners = append(fileSigners, signer)
			fileNames = append(fileNames, f)
		}
	}

	for _, s := range agentSigners {
		if t.IdentitiesOnly && !containsKey(filePubs, s.PublicKey()) {
			continue
		}
		cr.signers = append(cr.signers, s)
		desc := "agent: " + describeKey(s.PublicKey())
		if ak, ok := s.PublicKey().(*agent.Key); ok && ak.Comment != "" {
			desc += " " + ak.Comment
		}
		cr.offered = append(cr.offered, desc)
	}
	for i, s := range fileSigners {
		if hasKey(cr.signers, s.PublicKey()) {
			continue // already offered by the agent
		}
		cr.signers = append(cr.signers, s)
		cr.offered = append(cr.offered, fmt.Sprintf("%s (%s)", fileNames[i], describeKey(s.PublicKey())))
	}
	if len(cr.signers) == 0 {
		if sock == "" {
			cr.notes = append(cr.notes, "no ssh-agent (SSH_AUTH_SOCK is not set)")
		}
		if len(t.IdentityFiles) > 0 && len(cr.locked) == 0 {
			cr.notes = append(cr.notes, "no usable key file among "+strings.Join(t.IdentityFiles, ", "))
		}
		err := &AuthError{User: t.User, Addr: t.Addr(), Locked: cr.locked, Notes: cr.notes}
		cr.Close()
		return nil, err
	}
	return cr, nil
}

func (c *credentials) authError(t *Target, err error) *AuthError {
	return &AuthError{User: t.User, Addr: t.Addr(), Offered: c.offered, Locked: c.locked, Err: err}
}

func describeKey(k ssh.PublicKey) string { return k.Type() + " " + ssh.FingerprintSHA256(k) }

func readPublicKey(path string) ssh.PublicKey {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	k, _, _, _, err := ssh.ParseAuthorizedKey(b)
	if err != nil {
		return nil
	}
	return k
}

func hasKey(signers []ssh.Signer, k ssh.PublicKey) bool {
	for _, s := range signers {
		if bytes.Equal(s.PublicKey().Marshal(), k.Marshal()) {
			return true
		}
	}
	return false
}

func containsKey(keys []ssh.PublicKey, k ssh.PublicKey) bool {
	for _, x := range keys {
		if bytes.Equal(x.Marshal(), k.Marshal()) {
			return true
		}
	}
	return false
}
