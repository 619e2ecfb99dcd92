package npb_test

import (
	"fmt"

	"github.com/jiarun/jia/apps/internal/npb"
	"github.com/jiarun/jia/apps/internal/npb/npbtest"
)

// Run IS class S on two in-process ranks and report from rank 0.
func ExampleRun() {
	err := npbtest.Run(2, func(c npb.Comm) error {
		res, err := npb.Run("IS", c, 'S')
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			fmt.Printf("%s class %c, %d keys, %d ranks: verified=%v\n",
				res.Kernel, res.Class, res.Size[0], res.Ranks, res.Verified)
			for _, ch := range res.Checks {
				fmt.Printf("  %s: %v of %v\n", ch.Name, real(ch.Value), real(ch.Reference))
			}
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output:
	// IS class S, 65536 keys, 2 ranks: verified=true
	//   partial verification: 50 of 50
	//   full verification: 2 of 2
}

// An unsupported number of ranks is reported before any work.
func ExampleCheckRanks() {
	fmt.Println(npb.CheckRanks("CG", 'A', 3))
	fmt.Println(npb.CheckRanks("FT", 'A', 3))
	// Output:
	// npb: CG class A cannot run on 3 ranks: the number of ranks must be a power of two from 1 to 8192
	// <nil>
}
