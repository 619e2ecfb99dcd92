package uffd

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// SendFDs sends data and the descriptors fds over a Unix socket
// (SCM_RIGHTS). data must not be empty.
func SendFDs(c *net.UnixConn, data []byte, fds ...int) error {
	oob := unix.UnixRights(fds...)
	n, oobn, err := c.WriteMsgUnix(data, oob, nil)
	if err != nil {
		return fmt.Errorf("uffd: send %d descriptors: %w", len(fds), err)
	}
	if n != len(data) || oobn != len(oob) {
		return fmt.Errorf("uffd: send %d descriptors: short write", len(fds))
	}
	return nil
}

// RecvFDs receives a message of at most len(buf) bytes and the descriptors
// sent with it (SendFDs). The descriptors are close-on-exec.
func RecvFDs(c *net.UnixConn, buf []byte) (n int, fds []int, err error) {
	oob := make([]byte, unix.CmsgSpace(16*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return 0, nil, fmt.Errorf("uffd: receive descriptors: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return 0, nil, fmt.Errorf("uffd: receive descriptors: %w", err)
	}
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			return 0, nil, fmt.Errorf("uffd: receive descriptors: %w", err)
		}
		for _, fd := range got {
			unix.CloseOnExec(fd)
		}
		fds = append(fds, got...)
	}
	return n, fds, nil
}
