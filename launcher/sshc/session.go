package sshc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// Session is a remote command started with Start, with pipes to its
// standard input, output and error. Read Stdout and Stderr as the command
// runs (an unread pipe eventually stops the remote command), close Stdin to
// give it end-of-file, then Wait.
type Session struct {
	Stdin  io.WriteCloser
	Stdout io.Reader
	Stderr io.Reader

	c   *Client
	s   *ssh.Session
	cmd string
}

// Start runs cmd on the host through the login user's shell (as ssh HOST
// CMD does), without a terminal.
//
// Stopping it: closing the session or the connection does not stop the
// command (sshd leaves a command without a terminal running), and sshd
// ignores SSH signal requests for root logins. A remote program that must
// not outlive jiarun reads its standard input and exits, killing its
// children, at end-of-file: sshd closes that pipe when the session or the
// connection closes. See the package documentation.
func (c *Client) Start(cmd string) (*Session, error) {
	s, err := c.ssh.NewSession()
	if err != nil {
		return nil, c.opErr(cmd, "new session", err)
	}
	ses := &Session{c: c, s: s, cmd: cmd}
	if ses.Stdin, err = s.StdinPipe(); err == nil {
		if ses.Stdout, err = s.StdoutPipe(); err == nil {
			ses.Stderr, err = s.StderrPipe()
		}
	}
	if err == nil {
		err = s.Start(cmd)
	}
	if err != nil {
		s.Close()
		return nil, c.opErr(cmd, "start", err)
	}
	return ses, nil
}

// Wait waits for the command to exit. It returns nil for exit status 0; a
// non-zero status is an error wrapping *ssh.ExitError (use errors.As for
// ExitStatus). If the connection died, the error says why.
func (s *Session) Wait() error {
	err := s.s.Wait()
	if err == nil {
		return nil
	}
	return s.c.opErr(s.cmd, "", err)
}

// Close closes the session's channel. The remote command gets end-of-file
// on its standard input, and nothing more: see Start.
func (s *Session) Close() error {
	err := s.s.Close()
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// opErr wraps a session error with the host and command, and with the
// connection's fate when it ended meanwhile.
func (c *Client) opErr(cmd, what string, err error) error {
	var ee *ssh.ExitError
	if !errors.As(err, &ee) {
		// The channel ended without an exit status: the connection may be
		// going down; give watch a moment to say why.
		select {
		case <-c.done:
		case <-time.After(100 * time.Millisecond):
		}
		if cerr := c.Err(); cerr != nil {
			return fmt.Errorf("%w (running %s)", cerr, shortCmd(cmd))
		}
	}
	if what != "" {
		return fmt.Errorf("host %s: %s %s: %w", c.host, what, shortCmd(cmd), err)
	}
	return fmt.Errorf("host %s: %s: %w", c.host, shortCmd(cmd), err)
}

func shortCmd(cmd string) string {
	cmd = strings.Join(strings.Fields(cmd), " ")
	if len(cmd) > 60 {
		cmd = cmd[:57] + "..."
	}
	return fmt.Sprintf("%q", cmd)
}

// Output runs cmd on the host and returns its standard output. A failure
// includes the end of its standard error. Cancelling ctx closes the session
// (which does not stop the remote command: see Start).
func (c *Client) Output(ctx context.Context, cmd string) ([]byte, error) {
	s, err := c.ssh.NewSession()
	if err != nil {
		return nil, c.opErr(cmd, "new session", err)
	}
	defer s.Close()
	var stdout bytes.Buffer
	stderr := &tailBuffer{max: 2048}
	s.Stdout, s.Stderr = &stdout, stderr
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	if err := s.Run(cmd); err != nil {
		if ctx.Err() != nil {
			return stdout.Bytes(), fmt.Errorf("host %s: %s: %w", c.host, shortCmd(cmd), ctx.Err())
		}
		err = c.opErr(cmd, "", err)
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			err = fmt.Errorf("%w; stderr: %s", err, msg)
		}
		return stdout.Bytes(), err
	}
	return stdout.Bytes(), nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.buf) }
