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
