package npb

import "testing"

// The timed work of every kernel allocates nothing (one rank; the
// communication paths of more ranks use the same preallocated buffers).
func TestNoAllocInTimedRegion(t *testing.T) {
	c := selfComm{}
	check := func(name string, f func()) {
		f() // warm up: buffers that grow once
		if n := testing.AllocsPerRun(3, f); n != 0 {
			t.Errorf("%s: %v allocations per run", name, n)
		}
	}

	var q [epNQ]float64
	buf := new(epBuf)
	check("EP batch", func() { epBatch(SeedEP, &q, 0, 0, buf) })

	is := newISState(c, 'S')
	check("IS rank", func() { is.rank(2) })

	cg := newCGState(c, 'S')
	for i := range cg.x {
		cg.x[i] = 1
	}
	check("CG iteration", func() { cg.iterate() })

	mg := newMGState(c, 'S')
	if err := mg.zran3(); err != nil {
		t.Fatal(err)
	}
	check("MG V-cycle", func() {
		mg.mg3P()
		mg.resid(mg.u, mg.v, mg.r, mg.lt)
		mg.norm2u3(mg.r, mg.lt)
	})

	ft := newFTState(c, 'S')
	check("FT", func() {
		ft.setup()
		ft.forward()
		ft.evolveInverse()
		ft.checksum()
	})
}
