package npb

import (
	"slices"
	"testing"
)

// EPBatches over all of class S's batches, in two uneven parts, gives
// NPB's reference sums and the measured Gaussian pair counts: the same
// numbers as RunEP.
func TestEPBatchesClassS(t *testing.T) {
	p, err := EPParams('S')
	if err != nil {
		t.Fatal(err)
	}
	nb := p.Batches()
	split := nb/3 + 1
	sx1, sy1, q1 := EPBatches(0, split)
	sx2, sy2, q2 := EPBatches(split, nb-split)
	var q [EPAnnuli]float64
	for i := range q {
		q[i] = q1[i] + q2[i]
	}
	for _, c := range []Check{
		RelCheck("sx", complex(sx1+sx2, 0), complex(p.SX, 0), EPEpsilon),
		RelCheck("sy", complex(sy1+sy2, 0), complex(p.SY, 0), EPEpsilon),
	} {
		if !c.OK {
			t.Errorf("%s = %v, want %v within %g", c.Name, real(c.Value), real(c.Reference), EPEpsilon)
		}
	}
	if want := [EPAnnuli]float64{6140517, 5865300, 1100361, 68546, 1648, 17}; q != want {
		t.Errorf("annulus counts %v, want %v", q, want)
	}
}

// ISKeys gives the keys of RunIS's create_seq whatever the split among
// ranks.
func TestISKeysMatchCreateSeq(t *testing.T) {
	p, err := ISParams('S')
	if err != nil {
		t.Fatal(err)
	}
	s := newISState(selfComm{}, 'S')
	n := int64(1) << p.TotalKeysLog2
	got := make([]int32, n)
	for _, cut := range []int64{0, 1, 4431, n / 2, n - 1, n} {
		if err := ISKeys(got[:cut], 0, p.MaxKeyLog2); err != nil {
			t.Fatal(err)
		}
		if err := ISKeys(got[cut:], cut, p.MaxKeyLog2); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, s.keys) {
			t.Fatalf("split at %d: the keys differ from create_seq's", cut)
		}
	}
	if err := ISKeys(got, -1, p.MaxKeyLog2); err == nil {
		t.Error("ISKeys from index -1: no error")
	}
}

func TestDSMParamsBadClass(t *testing.T) {
	if _, err := EPParams('X'); err == nil {
		t.Error("EPParams('X'): no error")
	}
	if _, err := ISParams('Q'); err == nil {
		t.Error("ISParams('Q'): no error")
	}
	if p, err := ISParams('W'); err != nil || p.TotalKeysLog2 != 20 || p.TestRank[0] != 1249 {
		t.Errorf("ISParams('W') = %+v, %v", p, err)
	}
}
