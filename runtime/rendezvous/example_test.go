package rendezvous_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/jiarun/jia/runtime/rendezvous"
)

// A launcher serves the rendezvous of a two-rank job; each rank publishes
// its card, fences, reads every card and finalizes.
func Example() {
	secret := make([]byte, rendezvous.SecretLen)
	rand.Read(secret)
	srv, err := rendezvous.NewServer(rendezvous.ServerConfig{Size: 2, Job: "job-1", Secret: secret})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seen := make([]string, 2)
	var wg sync.WaitGroup
	for rank := range 2 {
		wg.Go(func() { // in a real job, each rank is its own process
			c, err := rendezvous.Dial(ctx, srv.Addr(), "job-1", rank, secret)
			if err != nil {
				log.Fatal(err)
			}
			c.Put(fmt.Sprintf("card/%d", rank), fmt.Appendf(nil, "rank %d at 10.0.0.%d", rank, rank+1))
			kv, err := c.Fence(ctx)
			if err != nil {
				log.Fatal(err)
			}
			seen[rank] = fmt.Sprintf("rank %d sees %q and %q", rank, kv["card/0"], kv["card/1"])
			if err := c.Finalize(); err != nil {
				log.Fatal(err)
			}
		})
	}
	for ev := range srv.Events() {
		if _, ok := ev.(rendezvous.AllFinalized); ok {
			break
		}
	}
	wg.Wait()
	for _, s := range seen {
		fmt.Println(s)
	}
	// Output:
	// rank 0 sees "rank 0 at 10.0.0.1" and "rank 1 at 10.0.0.2"
	// rank 1 sees "rank 0 at 10.0.0.1" and "rank 1 at 10.0.0.2"
}
