package launcher

import (
	"bytes"
	"io"
	"strconv"
	"sync"
)

// maxLine bounds how much of a line without a newline is held back; past it
// the bytes are written as a line of their own so memory stays bounded.
const maxLine = 1 << 20

// Sink is a destination shared by many ranks' streams: each Write of a
// forwarder holds whole lines, and writes never interleave.
type Sink struct {
	mu sync.Mutex
	w  io.Writer
}

// NewSink returns a Sink writing to w.
func NewSink(w io.Writer) *Sink { return &Sink{w: w} }

func (s *Sink) write(b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.w.Write(b)
	return err
}

// Forward copies r to sink line by line until r ends: only whole lines are
// written, so lines of different ranks never mix. When prefix is not empty
// every line is written behind it. A last line without a newline gets one.
func Forward(r io.Reader, sink *Sink, prefix []byte) error {
	var (
		buf  = make([]byte, 64<<10)
		acc  []byte // bytes read and not yet written
		out  []byte // reused output buffer when tagging
		rerr error
	)
	for rerr == nil {
		var n int
		n, rerr = r.Read(buf)
		if n == 0 {
			continue
		}
		acc = append(acc, buf[:n]...)
		end := bytes.LastIndexByte(acc, '\n') + 1
		if end == 0 && len(acc) >= maxLine {
			acc = append(acc, '\n')
			end = len(acc)
		}
		if end == 0 {
			continue
		}
		if err := sink.write(tag(&out, acc[:end], prefix)); err != nil {
			return err
		}
		acc = append(acc[:0], acc[end:]...)
	}
	if len(acc) > 0 {
		acc = append(acc, '\n')
		if err := sink.write(tag(&out, acc, prefix)); err != nil {
			return err
		}
	}
	if rerr == io.EOF {
		return nil
	}
	return rerr
}

// tag returns lines (whole lines) with prefix before each, using *out as
// scratch space; without a prefix it returns lines unchanged.
func tag(out *[]byte, lines, prefix []byte) []byte {
	if len(prefix) == 0 {
		return lines
	}
	o := (*out)[:0]
	for len(lines) > 0 {
		i := bytes.IndexByte(lines, '\n') + 1
		if i == 0 {
			i = len(lines)
		}
		o = append(o, prefix...)
		o = append(o, lines[:i]...)
		lines = lines[i:]
	}
	*out = o
	return o
}

// RankPrefix is the --tag-output prefix of a rank's lines.
func RankPrefix(rank int) []byte {
	return []byte("[" + strconv.Itoa(rank) + "] ")
}
