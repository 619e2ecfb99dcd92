// Package procfd opens a descriptor of another process of the same user
// through /proc/<pid>/fd/<fd>: how the processes of a host's ranks (ranks,
// pagers) share the memfds of the barrier board, the direct-read bitmaps
// and the host-shared memory without passing descriptors over a socket.
package procfd

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Open opens descriptor fd of process pid, read-write when write is set,
// read-only otherwise, close-on-exec, and returns the new descriptor and
// the size of the file it names.
func Open(pid, fd int, write bool) (int, int64, error) {
	mode := unix.O_RDONLY
	if write {
		mode = unix.O_RDWR
	}
	f, err := unix.Open(fmt.Sprintf("/proc/%d/fd/%d", pid, fd), mode|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, 0, fmt.Errorf("open descriptor %d of process %d: %w", fd, pid, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(f, &st); err != nil {
		unix.Close(f)
		return -1, 0, fmt.Errorf("fstat descriptor %d of process %d: %w", fd, pid, err)
	}
	return f, st.Size, nil
}
