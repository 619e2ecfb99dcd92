package procfd

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// A memfd of this process opened again through /proc has its size and
// contents; a descriptor that does not exist is an error naming it.
func TestOpenSeesTheSameFile(t *testing.T) {
	fd, err := unix.MemfdCreate("procfd-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.Pwrite(fd, []byte("jiarun"), 8192); err != nil {
		t.Fatal(err)
	}
	f, size, err := Open(os.Getpid(), fd, false)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(f)
	if size != 8192+6 {
		t.Fatalf("size %d, want %d", size, 8192+6)
	}
	b := make([]byte, 6)
	if _, err := unix.Pread(f, b, 8192); err != nil || string(b) != "jiarun" {
		t.Fatalf("read %q, %v", b, err)
	}
	if _, err := unix.Pwrite(f, b, 0); err == nil {
		t.Fatal("a read-only descriptor took a write")
	}
	if _, _, err := Open(os.Getpid(), 1<<20, true); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("missing descriptor: %v", err)
	}
}
