package shm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DefaultDir is where segments are created: a tmpfs shared by the processes
// of the host.
const DefaultDir = "/dev/shm"

// SegmentPrefix starts the name of every segment the provider creates. The
// full name is
//
//	jia-<job>-r<rank>-p<pid>-d<serial>-<what>
//
// where <job> is the job id with characters other than letters, digits, '.',
// '_' and '-' replaced by '_', and <what> is "main" or "a<id>" (memory from
// PD.Alloc). Cleanup uses the pid to find the segments of dead processes.
const SegmentPrefix = "jia-"

// segment is a mapped shared-memory file.
type segment struct {
	dir, name string
	mem       []byte

	mu       sync.Mutex
	unlinked bool
	unmapped bool
}

func segPath(dir, name string) string { return filepath.Join(dir, name) }

// createSegment creates, sizes and maps a new segment file.
func createSegment(dir, name string, size int) (*segment, error) {
	path := segPath(dir, name)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		_ = unix.Unlink(path)
		return nil, fmt.Errorf("size %s to %d bytes: %w", path, size, err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		_ = unix.Unlink(path)
		return nil, fmt.Errorf("map %s (%d bytes): %w", path, size, err)
	}
	return &segment{dir: dir, name: name, mem: mem}, nil
}

// openSegment maps an existing segment file of at least min and at most max
// bytes.
func openSegment(dir, name string, min, max int) (*segment, error) {
	path := segPath(dir, name)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Size < int64(min) || st.Size > int64(max) {
		return nil, fmt.Errorf("%s has %d bytes, want %d..%d", path, st.Size, min, max)
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	return &segment{dir: dir, name: name, mem: mem}, nil
}

// unlink removes the file; the mappings stay valid. It is idempotent.
func (s *segment) unlink() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unlinked {
		return nil
	}
	s.unlinked = true
	if err := unix.Unlink(segPath(s.dir, s.name)); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unlink %s: %w", segPath(s.dir, s.name), err)
	}
	return nil
}

// unmap releases the mapping. It is idempotent.
func (s *segment) unmap() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unmapped {
		return nil
	}
	s.unmapped = true
	if err := unix.Munmap(s.mem); err != nil {
		return fmt.Errorf("unmap %s: %w", s.name, err)
	}
	return nil
}

// blank replaces the mapping with zero-filled read-only memory at the same
// addresses, which releases the segment's pages (once unlinked and unmapped
// by every peer) but keeps the addresses valid: a reader that still holds a
// slice of the segment reads zeros instead of faulting. The address range
// stays reserved for the life of the process. It is idempotent.
func (s *segment) blank() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unmapped {
		return nil
	}
	s.unmapped = true
	_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(unsafe.SliceData(s.mem)), uintptr(len(s.mem)),
		unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|unix.MAP_NORESERVE)
	if err != nil {
		return fmt.Errorf("blank %s: %w", s.name, err)
	}
	return nil
}

// JobTag is job as it appears in the names of the job's segment files
// (after SegmentPrefix): the characters allowed in those names, others
// mapped to '_', at most 48. Other files that belong to a rank and must be
// found by Leftovers, Stale and Cleanup after a crash are named with it
// too.
func JobTag(job string) string {
	var b strings.Builder
	for _, r := range job {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 48 {
			break
		}
	}
	return b.String()
}

// Segment is a shared-memory file left by the provider, as found by
// Leftovers.
type Segment struct {
	// Path is the file's path.
	Path string
	// Pid is the process that created it.
	Pid int
	// Alive reports whether that process still exists.
	Alive bool
}

// Leftovers lists the segment files of job in dir (DefaultDir when empty).
// Segments are normally unlinked as soon as every local peer has mapped them
// and at the latest when the device closes, so files that remain after a
// job belong to processes that crashed.
func Leftovers(dir, job string) ([]Segment, error) {
	if dir == "" {
		dir = DefaultDir
	}
	prefix := SegmentPrefix + JobTag(job) + "-r"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("shm: list %s: %w", dir, err)
	}
	var out []Segment
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		pid := segmentPid(name[len(prefix):])
		if pid <= 0 {
			continue
		}
		out = append(out, Segment{Path: filepath.Join(dir, name), Pid: pid, Alive: processAlive(pid)})
	}
	return out, nil
}

// Stale lists the segment files in dir (DefaultDir when empty) of any job
// whose creating process has exited and which the calling user owns: what
// ranks killed without a chance to clean up (SIGKILL, a launcher killed
// with kill -9) leave behind. Files of live processes, of other users and
// with names the provider does not make are not listed.
func Stale(dir string) ([]Segment, error) {
	if dir == "" {
		dir = DefaultDir
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("shm: list %s: %w", dir, err)
	}
	uid := uint32(os.Getuid())
	var out []Segment
	for _, e := range ents {
		pid := stalePid(e.Name())
		if pid <= 0 || processAlive(pid) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		if st, ok := info.Sys().(*syscall.Stat_t); !ok || st.Uid != uid {
			continue
		}
		out = append(out, Segment{Path: filepath.Join(dir, e.Name()), Pid: pid})
	}
	return out, nil
}

// CleanupStale removes the files Stale lists and returns their paths.
func CleanupStale(dir string) ([]string, error) {
	segs, err := Stale(dir)
	if err != nil {
		return nil, err
	}
	return removeSegments(segs)
}

// removeSegments removes the files of segs and returns the paths it
// removed (or found gone).
func removeSegments(segs []Segment) ([]string, error) {
	var removed []string
	var errs []error
	for _, s := range segs {
		if err := os.Remove(s.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("shm: cleanup: %w", err))
			continue
		}
		removed = append(removed, s.Path)
	}
	return removed, errors.Join(errs...)
}

// stalePid returns the pid in a segment name of any job,
// jia-<job>-r<rank>-p<pid>-d<serial>-<what>, or 0 when name is not one.
// The job part may itself hold dashes, so the name is read from the end.
func stalePid(name string) int {
	rest, ok := strings.CutPrefix(name, SegmentPrefix)
	if !ok {
		return 0
	}
	f := strings.Split(rest, "-")
	// ... r<rank> p<pid> d<serial> <what>
	if len(f) < 5 {
		return 0
	}
	r, p, d := f[len(f)-4], f[len(f)-3], f[len(f)-2]
	if !digitsAfter(r, 'r') || !digitsAfter(p, 'p') || !digitsAfter(d, 'd') {
		return 0
	}
	pid, err := strconv.Atoi(p[1:])
	if err != nil {
		return 0
	}
	return pid
}

// digitsAfter reports whether s is c followed by one or more digits.
func digitsAfter(s string, c byte) bool {
	if len(s) < 2 || s[0] != c {
		return false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Cleanup removes the segment files of job in dir (DefaultDir when empty)
// whose creating process has exited, or all of them when all is true, and
// returns the paths it removed.
func Cleanup(dir, job string, all bool) ([]string, error) {
	segs, err := Leftovers(dir, job)
	if err != nil {
		return nil, err
	}
	if !all {
		segs = slices.DeleteFunc(segs, func(s Segment) bool { return s.Alive })
	}
	return removeSegments(segs)
}

// segmentPid parses "<rank>-p<pid>-..." and returns pid, or 0.
func segmentPid(rest string) int {
	_, after, ok := strings.Cut(rest, "-p")
	if !ok {
		return 0
	}
	num, _, _ := strings.Cut(after, "-")
	pid, err := strconv.Atoi(num)
	if err != nil {
		return 0
	}
	return pid
}

// processAlive reports whether process pid exists and is not a zombie (a
// process killed whose parent has not reaped it yet has exited all the
// same: its memory is gone).
func processAlive(pid int) bool {
	if err := unix.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}
