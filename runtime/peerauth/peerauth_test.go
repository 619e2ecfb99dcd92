package peerauth

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

func params(secret byte, proto string) Params {
	return Params{Proto: proto, Secret: bytes.Repeat([]byte{secret}, 32), Job: "j1", Timeout: 5 * time.Second}
}

// serve accepts one connection as rank self of 4 and reports the outcome.
func serve(t *testing.T, p Params, self int) (string, chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	res := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			res <- err
			return
		}
		defer c.Close()
		from, r, err := Accept(c, p, self, 4, 4096)
		if err == nil {
			var b [2]byte
			if _, err = r.Read(b[:]); err == nil && (from != 1 || string(b[:]) != "ok") {
				err = errors.New("wrong peer or data")
			}
		}
		res <- err
	}()
	return ln.Addr().String(), res
}

func TestHandshake(t *testing.T) {
	for _, c := range []struct {
		name      string
		dialer    Params
		to        int
		dialErr   string
		acceptErr bool
	}{
		{"same job and secret", params(7, "P1"), 2, "", false},
		{"wrong secret", params(8, "P1"), 2, "authentication failed", true},
		{"other protocol", params(7, "P2"), 2, "is not the peer", true},
		{"wrong destination rank", params(7, "P1"), 3, "authentication failed", true},
		{"other job", Params{Proto: "P1", Secret: bytes.Repeat([]byte{7}, 32), Job: "j2", Timeout: time.Second}, 2, "authentication failed", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr, res := serve(t, params(7, "P1"), 2)
			conn, err := Dial(addr, c.dialer, 1, c.to, "the peer")
			if c.dialErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				conn.Write([]byte("ok"))
				conn.Close()
			} else if err == nil || !strings.Contains(err.Error(), c.dialErr) {
				t.Fatalf("dial: %v, want %q", err, c.dialErr)
			}
			if aerr := <-res; (aerr != nil) != c.acceptErr {
				t.Fatalf("accept: %v", aerr)
			}
		})
	}
}

// The dialler speaks first: an acceptor hears the protocol name before it
// sends its challenge, so a silent client learns nothing, and Dial's first
// bytes are that name.
func TestDiallerSpeaksFirst(t *testing.T) {
	p := params(7, "P1")
	p.Timeout = 300 * time.Millisecond
	addr, res := serve(t, p, 2)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(time.Second))
	var b [1]byte
	if n, _ := c.Read(b[:]); n != 0 {
		t.Fatalf("the acceptor spoke first")
	}
	if err := <-res; err == nil || !strings.Contains(err.Error(), "read protocol") {
		t.Fatalf("accept: %v, want a timeout reading the protocol", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(time.Second))
		b := make([]byte, 2)
		n, _ := c.Read(b)
		got <- string(b[:n])
	}()
	Dial(ln.Addr().String(), p, 1, 2, "the peer")
	if s := <-got; s != "P1" {
		t.Fatalf("the dialler's first bytes: %q, want P1", s)
	}
}
