package sshc_test

import (
	"context"
	"io"
	"log"
	"os"
	"time"

	"github.com/jiarun/jia/launcher/sshc"
)

// Stage a program on a host, run it, and stop it by closing its standard
// input (the remote side must exit at end-of-file: SSH signals are ignored
// for root logins, and closing a session does not stop a command).
func ExampleDial() {
	ctx := context.Background()
	c, err := sshc.Dial(ctx, "node7", &sshc.Config{Timeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err) // e.g. "host node7: ssh handshake: host key of 10.1.2.7 is not known (...); to trust it, add this line to ..."
	}
	defer c.Close()

	if err := c.CopyFile(ctx, "./app", "~/.cache/jiarun/app"); err != nil {
		log.Fatal(err)
	}
	s, err := c.Start("~/.cache/jiarun/app")
	if err != nil {
		log.Fatal(err)
	}
	go io.Copy(os.Stdout, s.Stdout)
	go io.Copy(os.Stderr, s.Stderr)

	exited := make(chan error, 1)
	go func() { exited <- s.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			log.Print(err) // "host node7: \"~/.cache/jiarun/app\": Process exited with status 1"
		}
	case <-c.Done():
		log.Print(c.Err()) // "host node7: connection lost: no answer to keepalives and nothing received for 3s (3 × 1s)"
	case <-time.After(time.Minute):
		s.Stdin.Close() // "stop now"
		<-exited
	}
}
