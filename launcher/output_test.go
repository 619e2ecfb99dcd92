package launcher

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
)

// recorder records each Write separately.
type recorder struct {
	mu     sync.Mutex
	writes []string
}

func (r *recorder) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, string(b))
	return len(b), nil
}

func TestForwardWritesOnlyWholeLines(t *testing.T) {
	in := "alpha\nbeta gamma\ndelta"
	rec := &recorder{}
	// One byte at a time: the worst case for mid-line splits.
	if err := Forward(iotest.OneByteReader(strings.NewReader(in)), NewSink(rec), nil); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(rec.writes, "")
	if got != "alpha\nbeta gamma\ndelta\n" {
		t.Fatalf("forwarded %q", got)
	}
	for _, w := range rec.writes {
		if !strings.HasSuffix(w, "\n") {
			t.Errorf("write %q does not end a line", w)
		}
	}
}

func TestForwardTagsEveryLine(t *testing.T) {
	rec := &recorder{}
	in := "one\ntwo\n\nthree"
	if err := Forward(iotest.HalfReader(strings.NewReader(in)), NewSink(rec), RankPrefix(12)); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(rec.writes, ""), "[12] one\n[12] two\n[12] \n[12] three\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestForwardBoundsALineWithoutNewline(t *testing.T) {
	rec := &recorder{}
	in := strings.Repeat("x", maxLine+10)
	if err := Forward(strings.NewReader(in), NewSink(rec), nil); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(rec.writes, "")
	if len(got) != len(in)+2 || strings.Count(got, "\n") != 2 {
		t.Fatalf("got %d bytes with %d newlines", len(got), strings.Count(got, "\n"))
	}
}

func TestForwardConcurrentStreamsNeverMix(t *testing.T) {
	var out bytes.Buffer
	sink := NewSink(&out)
	var wg sync.WaitGroup
	for s := 0; s < 8; s++ {
		pr, pw := io.Pipe()
		wg.Add(2)
		go func() {
			defer wg.Done()
			Forward(pr, sink, RankPrefix(s))
		}()
		go func() {
			defer wg.Done()
			line := strings.Repeat(string(rune('a'+s)), 100)
			for i := 0; i < 200; i++ {
				// Each line in three writes.
				pw.Write([]byte(line[:30]))
				pw.Write([]byte(line[30:]))
				pw.Write([]byte("\n"))
			}
			pw.Close()
		}()
	}
	wg.Wait()
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		rank, body, ok := splitTagged(l)
		if !ok || body != strings.Repeat(string(rune('a'+rank)), 100) {
			t.Fatalf("mixed line %q", l)
		}
	}
}

// splitTagged splits "[rank] body".
func splitTagged(l string) (int, string, bool) {
	tag, body, ok := strings.Cut(l, "] ")
	if !ok || !strings.HasPrefix(tag, "[") {
		return 0, "", false
	}
	n, err := strconv.Atoi(tag[1:])
	return n, body, err == nil
}

func TestGoPackageName(t *testing.T) {
	for src, want := range map[string]string{
		"package main\n": "main",
		"// Command x.\n/* more */\npackage main": "main",
		"//go:build linux\n\npackage foo\n":       "foo",
		"package":                                 "",
		"func f() {}":                             "",
	} {
		if got := goPackageName([]byte(src)); got != want {
			t.Errorf("%q: got %q, want %q", src, got, want)
		}
	}
}
