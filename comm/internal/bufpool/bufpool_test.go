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
