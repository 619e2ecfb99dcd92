package config_test

import (
	"testing"

	"github.com/jiarun/jia/runtime"
	"github.com/jiarun/jia/runtime/config"
)

// TestContractIsNotConfig checks that the launch contract's variables, which
// the config package lists by hand to avoid importing runtime, are neither
// configuration nor reported as unknown.
func TestContractIsNotConfig(t *testing.T) {
	c := runtime.Contract{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Job: "j", Rendezvous: "h:1",
		Secret: make([]byte, runtime.SecretLen), Host: "h", Config: "[log]"}
	env := c.Environ()
	if len(env) != 9 {
		t.Fatalf("the contract has %d variables; update contractEnv in env.go", len(env))
	}
	if u := config.UnknownEnv(env); len(u) != 0 {
		t.Errorf("UnknownEnv(contract) = %v, want none", u)
	}
	for _, name := range []string{runtime.EnvRank, runtime.EnvSize, runtime.EnvLocalRank, runtime.EnvLocalSize,
		runtime.EnvJob, runtime.EnvRendezvous, runtime.EnvSecret, runtime.EnvHost, runtime.EnvConfig} {
		if u := config.UnknownEnv([]string{name + "=x"}); len(u) != 0 {
			t.Errorf("UnknownEnv reports the contract variable %s", name)
		}
	}
}
