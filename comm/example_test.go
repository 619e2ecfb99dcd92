package comm_test

import (
	"fmt"
	"sync"

	"github.com/jiarun/jia/comm"
	"github.com/jiarun/jia/comm/memtransport"
)

// spmd runs body on n ranks of an in-memory fabric, one goroutine each, as
// jiarun runs n processes.
func spmd(n int, body func(world *comm.Comm) error) {
	f := memtransport.New(n, memtransport.Options{})
	defer f.Close()
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			world, err := comm.NewWorld(f.Endpoint(r), nil)
			if err == nil {
				err = body(world)
			}
			if err != nil {
				fmt.Println(err)
			}
		}()
	}
	wg.Wait()
}

// A ring shift with Sendrecv, a sum with Allreduce and a gather of the
// results at rank 0, on 4 ranks.
func Example() {
	const n = 4
	spmd(n, func(world *comm.Comm) error {
		rank, size := world.Rank(), world.Size()

		// Pass this rank's number to the right neighbour.
		left := []int{-1}
		_, err := comm.Sendrecv(world, []int{rank}, (rank+1)%size, 0, left, (rank-1+size)%size, 0)
		if err != nil {
			return err
		}

		// Sum rank+1 over all ranks: 1+2+3+4.
		sum := []float64{0}
		if err := comm.Allreduce(world, []float64{float64(rank + 1)}, sum, comm.Sum); err != nil {
			return err
		}

		// Gather (left neighbour, sum) pairs at rank 0.
		var all []float64
		if rank == 0 {
			all = make([]float64, 2*size)
		}
		if err := comm.Gather(world, []float64{float64(left[0]), sum[0]}, all, 0); err != nil {
			return err
		}
		if rank == 0 {
			for r := 0; r < size; r++ {
				fmt.Printf("rank %d: left neighbour %v, sum %v\n", r, all[2*r], all[2*r+1])
			}
		}
		return nil
	})
	// Output:
	// rank 0: left neighbour 3, sum 10
	// rank 1: left neighbour 0, sum 10
	// rank 2: left neighbour 1, sum 10
	// rank 3: left neighbour 2, sum 10
}

// Probe tells the length of a message before it is received.
func ExampleComm_Probe() {
	spmd(2, func(world *comm.Comm) error {
		if world.Rank() == 1 {
			return comm.Send(world, []int32{10, 20, 30}, 0, 5)
		}
		st, err := world.Probe(comm.AnySource, comm.AnyTag)
		if err != nil {
			return err
		}
		buf := make([]int32, comm.CountOf[int32](st))
		if _, err := comm.Recv(world, buf, st.Source, st.Tag); err != nil {
			return err
		}
		fmt.Println("from", st.Source, "tag", st.Tag, ":", buf)
		return nil
	})
	// Output: from 1 tag 5 : [10 20 30]
}

// MinLoc finds the smallest value and the rank that holds it.
func ExampleAllreduce_minLoc() {
	spmd(3, func(world *comm.Comm) error {
		r := world.Rank()
		mine := []comm.Loc[float64]{{Val: []float64{2.5, 0.5, 1.5}[r], Idx: r}}
		best := make([]comm.Loc[float64], 1)
		if err := comm.Allreduce(world, mine, best, comm.MinLoc); err != nil {
			return err
		}
		if r == 0 {
			fmt.Printf("min %v at rank %d\n", best[0].Val, best[0].Idx)
		}
		return nil
	})
	// Output: min 0.5 at rank 1
}

// A column of a row-major matrix is a Vector: it is sent without packing
// and received into a contiguous slice.
func ExampleSendVector() {
	spmd(2, func(world *comm.Comm) error {
		const rows, cols = 3, 4
		if world.Rank() == 0 {
			m := []float64{
				0, 1, 2, 3,
				10, 11, 12, 13,
				20, 21, 22, 23,
			}
			col2 := comm.Vector[float64]{Data: m[2:], Count: rows, BlockLen: 1, Stride: cols}
			return comm.SendVector(world, col2, 1, 0)
		}
		col := make([]float64, rows)
		if _, err := comm.Recv(world, col, 0, 0); err != nil {
			return err
		}
		fmt.Println(col)
		return nil
	})
	// Output: [2 12 22]
}

// Split makes one communicator per color: here the even and the odd
// ranks, each summing its members' numbers.
func ExampleComm_Split() {
	spmd(4, func(world *comm.Comm) error {
		color := world.Rank() % 2
		half, err := world.Split(color, world.Rank())
		if err != nil {
			return err
		}
		defer half.Free()
		sum := []int{0}
		if err := comm.Allreduce(half, []int{world.Rank()}, sum, comm.Sum); err != nil {
			return err
		}
		var sums []int
		if world.Rank() == 0 {
			sums = make([]int, world.Size())
		}
		if err := comm.Gather(world, sum, sums, 0); err != nil {
			return err
		}
		if world.Rank() == 0 {
			fmt.Println("even ranks:", sums[0], "odd ranks:", sums[1])
		}
		return nil
	})
	// Output: even ranks: 2 odd ranks: 4
}
