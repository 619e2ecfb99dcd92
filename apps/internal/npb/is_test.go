package npb

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// isSplit2 keeps the keys of [minKey, minKey+nOwn) in order at the front of
// own and the others in order at the front of out, whatever the range: all
// keys, none, the low end, the high end, empty.
func TestISSplit2(t *testing.T) {
	const maxKey = 1 << 11
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([]int32, 5000)
	for i := range keys {
		keys[i] = rng.Int32N(maxKey)
	}
	keys[0], keys[1] = 0, maxKey-1
	for _, tc := range []struct{ minKey, nOwn int32 }{
		{0, maxKey / 2}, {maxKey / 2, maxKey / 2}, {0, maxKey}, {0, 0},
		{1 << 9, 0}, {1 << 9, 1 << 9}, {0, 1}, {maxKey - 1, 1},
	} {
		t.Run(fmt.Sprintf("[%d,+%d)", tc.minKey, tc.nOwn), func(t *testing.T) {
			var wantOwn, wantOut []int32
			for _, k := range keys {
				if tc.minKey <= k && k < tc.minKey+tc.nOwn {
					wantOwn = append(wantOwn, k)
				} else {
					wantOut = append(wantOut, k)
				}
			}
			own, out := make([]int32, len(keys)), make([]int32, len(keys))
			a, b := isSplit2(keys, own, out, tc.minKey, int(tc.nOwn))
			if a != len(wantOwn) || b != len(wantOut) {
				t.Fatalf("kept %d and sent %d, want %d and %d", a, b, len(wantOwn), len(wantOut))
			}
			if !slices.Equal(own[:a], wantOwn) || !slices.Equal(out[:b], wantOut) {
				t.Fatal("keys not partitioned in order")
			}
		})
	}
}
