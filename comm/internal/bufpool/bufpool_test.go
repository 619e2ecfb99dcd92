package bufpool

import "testing"

func TestPoolRecycles(t *testing.T) {
	var p Pool
	b := p.Get(100)
	if len(b) != 100 || cap(b) != 128 {
		t.Fatalf("Get(100): len %d cap %d, want 100 and 128", len(b), cap(b))
	}
	p.Put(b)
	if c := p.Get(120); &c[:1][0] != &b[:1][0] {
		t.Fatalf("Get after Put did not reuse the buffer")
	}
	p.Put(make([]byte, 100)) // not from Get: capacity not a power of two
	if n := len(p.free[sizeClass(128)]); n != 0 {
		t.Fatalf("a foreign buffer was kept (%d in the class)", n)
	}
	for range 8 { // at most four buffers of a class above 1 MiB
		p.Put(make([]byte, 0, 4<<20))
	}
	if n := len(p.free[sizeClass(4<<20)]); n != 4 {
		t.Fatalf("%d buffers of 4 MiB kept, want 4", n)
	}
	if a := testing.AllocsPerRun(100, func() { p.Put(p.Get(1000)) }); a != 0 {
		t.Fatalf("Get and Put allocate %v times", a)
	}
}

// A working set larger than the fixed bound (a window of 64 backlogged
// 16 KiB messages: 32 KiB buffers, 2 MiB) is kept once it has been out at
// once: the next window allocates nothing.
func TestPoolKeepsWorkingSet(t *testing.T) {
	var p Pool
	window := make([][]byte, 64)
	round := func() {
		for i := range window {
			window[i] = p.Get(16<<10 + 100)
		}
		for i := range window {
			p.Put(window[i])
			window[i] = nil
		}
	}
	round()
	if a := testing.AllocsPerRun(10, round); a != 0 {
		t.Fatalf("a window of 64 buffers of 32 KiB allocates %v times after the first", a)
	}
	// The working set does not let a class grow past keepPeak.
	big := make([][]byte, 2*keepPeak/(64<<10))
	for i := range big {
		big[i] = p.Get(64 << 10)
	}
	for _, b := range big {
		p.Put(b)
	}
	if got := p.bytes[sizeClass(64<<10)]; got > keepPeak {
		t.Fatalf("%d bytes of 64 KiB buffers kept, more than %d", got, keepPeak)
	}
}
