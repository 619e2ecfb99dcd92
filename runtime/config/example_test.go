package config_test

import (
	"fmt"

	"github.com/jiarun/jia/runtime/config"
)

// A job's configuration is resolved once by jiarun, from jia.toml and the
// environment, and passed to every rank as TOML text.
func Example() {
	// What jiarun read from jia.toml (config.Load or config.Resolve).
	c, err := config.Decode(`
[comm]
eager_limit = "32KiB"

[dsm]
prefetch_pages = 8
`)
	if err != nil {
		fmt.Println(err)
		return
	}
	// JIA_* variables override the file.
	env := map[string]string{"JIA_TRANSPORT": "tcp", "JIA_DSM_STATS": "true"}
	if err := c.ApplyEnv(func(name string) string { return env[name] }); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("transport:", c.Transport.Kind)
	fmt.Println("eager limit for tcp:", c.Comm.EagerLimitFor(config.TransportTCP))
	fmt.Println("prefetch:", c.DSM.PrefetchPages, "stats:", c.DSM.Stats)

	// The launcher hands the result to the ranks, which decode it.
	text, _ := c.Encode()
	rank, _ := config.Decode(text)
	fmt.Println("same in the rank:", rank == c)

	// Mistakes name the file, line and key.
	_, err = config.Decode("[dsm]\nprefech_pages = 8\n")
	fmt.Println(err)
	// Output:
	// transport: tcp
	// eager limit for tcp: 32KiB
	// prefetch: 8 stats: true
	// same in the rank: true
	// config data:2: unknown key "dsm.prefech_pages" (did you mean "dsm.prefetch_pages"?)
}

func ExampleParseByteSize() {
	for _, s := range []string{"65536", "64KiB", "4M", "1.5G"} {
		b, _ := config.ParseByteSize(s)
		fmt.Println(int64(b), b)
	}
	// Output:
	// 65536 64KiB
	// 65536 64KiB
	// 4194304 4MiB
	// 1610612736 1536MiB
}
