package npb_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/jiarun/jia/apps/internal/npb"
	"github.com/jiarun/jia/apps/internal/npb/npbtest"
)

// After one IS ranking every key is held by exactly one rank, the one
// whose key range holds it, and every rank has keys to rank: the exchange
// loses, duplicates and misroutes none (two ranks take their own path).
func TestISExchange(t *testing.T) {
	for _, np := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("np=%d", np), func(t *testing.T) {
			var mu sync.Mutex
			var all, held []int32
			err := npbtest.Run(np, func(c npb.Comm) error {
				keys, ranked, lo, hi, err := npb.ISRankOnce(c, 'W', 3)
				if err != nil {
					return err
				}
				if len(ranked) == 0 {
					return fmt.Errorf("rank %d ranked no keys", c.Rank())
				}
				for _, k := range ranked {
					if k < lo || k > hi {
						return fmt.Errorf("rank %d holds key %d outside its range [%d, %d]", c.Rank(), k, lo, hi)
					}
				}
				mu.Lock()
				defer mu.Unlock()
				all = append(all, keys...)
				held = append(held, ranked...)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(all)
			slices.Sort(held)
			if !slices.Equal(all, held) {
				t.Fatalf("the ranks hold %d keys, not the %d generated (or not the same ones)", len(held), len(all))
			}
		})
	}
}
