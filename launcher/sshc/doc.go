// Package sshc starts remote commands over SSH for the jiarun launcher, with
// golang.org/x/crypto/ssh, behaving as a user of OpenSSH's ssh expects.
//
// # One connection per host
//
// Dial opens one SSH connection to a host; any number of sessions run on it
// (Start for a command with pipes, Output to collect a command's output,
// Copy and CopyFile to put a file on the host, verified by SHA-256).
//
//	c, err := sshc.Dial(ctx, "node7", &sshc.Config{AcceptNew: acceptNew})
//	if err != nil {
//		return err // "host node7: ssh handshake: host key of 10.1.2.7 is not known ..."
//	}
//	defer c.Close()
//	s, err := c.Start("/home/u/.cache/jiarun/jiarun proxy")
//
// # Configuration, as ssh does it
//
// Host names are resolved through ~/.ssh/config and /etc/ssh/ssh_config
// (or only Config.ConfigFile, like ssh -F), parsed by
// github.com/kevinburke/ssh_config: Host aliases, HostName, User, Port,
// IdentityFile (several, with ~ and %d %u %h %r %p %n tokens), IdentitiesOnly,
// UserKnownHostsFile, GlobalKnownHostsFile, HostKeyAlias, ConnectTimeout,
// StrictHostKeyChecking (accept-new) and ProxyJump (one or more hops, each
// resolved through the config again; the connection to each next hop is a
// direct-tcpip channel through the previous one). The first value found
// wins, as in OpenSSH. ProxyCommand is refused with an error rather than
// ignored. Fields set in Config override the files, like ssh's options.
//
// # Authentication
//
// Keys from ssh-agent (SSH_AUTH_SOCK) are offered first, then the key files:
// Config.IdentityFile, else the config's IdentityFile lines, else
// ~/.ssh/id_ed25519, id_ecdsa and id_rsa. Nothing ever prompts: a key file
// protected by a passphrase is used through the agent when the agent holds
// it, and otherwise reported in the error (*AuthError) with the ssh-add
// command that fixes it. When the server accepts none of the keys, the
// *AuthError lists what was offered.
//
// # Host keys
//
// Host keys are checked against known_hosts (golang.org/x/crypto/ssh/knownhosts),
// under the name ssh uses: HostKeyAlias or HostName, "[name]:port" for ports
// other than 22. Only the key types known_hosts has for the host are
// negotiated, so a server with several host keys presents the one on record.
// An unknown host is refused with a *HostKeyError whose message holds the
// exact line to add; a changed key is refused naming the file and line of
// the old key. With Config.AcceptNew (ssh's StrictHostKeyChecking=accept-new)
// an unknown host's key is appended to the first known_hosts file instead;
// a changed key is still refused.
//
// # Time limits and dead connections
//
// ssh.ClientConfig.Timeout bounds only the TCP connect: a host that accepts
// the connection but never answers (its processes frozen with SIGSTOP, say)
// used to hang the handshake for 11 minutes. Here the TCP connect and the
// whole handshake of each hop share Config.Timeout (a deadline on the
// connection, cleared once logged in).
//
// Without keepalives a cut link is never noticed: a session's Wait blocks
// for ever. A Client sends a keepalive@openssh.com request every
// Config.KeepaliveInterval (1 s) and closes the connection after
// Config.KeepaliveCountMax (3) intervals without an answer in which nothing
// else arrived either (as OpenSSH's ServerAliveInterval counts silence: a
// loaded peer busy with a transfer answers late, but its data and window
// updates keep arriving); Done is then
// closed, Err says which host was lost and why, and every session's Wait
// returns that error. With the defaults a cut link is noticed in about 4 s.
//
// # Stopping remote commands
//
// Measured against OpenSSH 9.2 (the test cluster in e2e/cluster):
//
//   - A command started without a terminal survives the end of its session
//     and of the connection: closing the session, or the whole connection,
//     leaves it running as an orphan. (With a pty it would get SIGHUP, but a
//     pty merges stderr into stdout and mangles binary data.)
//   - sshd ignores SSH "signal" requests for root logins ("session signalling
//     requires privilege separation"): ssh.Session.Signal returns nil and
//     nothing happens.
//   - When the connection closes, sshd does close the command's standard
//     input. (After a cut link, sshd only notices after its own
//     ClientAliveInterval × ClientAliveCountMax.)
//
// So stopping remote work must not rely on SSH signals: the remote side (the
// jiarun proxy) treats end-of-file on its standard input as "exit now and
// kill your children", and jiarun stops a host's work by closing that
// session's stdin (or the connection). The shell equivalent of that watchdog,
// used in the tests, is
//
//	sh -c 'work & p=$!; while read -r _; do :; done; kill $p'
//
// # Errors
//
// Every error names the host it concerns: "host jh2: ssh handshake: …",
// "host jh2: ssh connect to 10.77.0.12:22: …", "host jh3: connection lost:
// no answer to keepalives and nothing received for 3s (3 × 1s)". Use errors.As for *HostKeyError,
// *AuthError and *ssh.ExitError.
package sshc
