package runtime

import (
	"errors"
	"strings"
	"testing"

	"github.com/jiarun/jia/runtime/pmix"
)

func envOf(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

// What srun --mpi=pmix puts in task 2's environment (2 tasks per node).
var pmixEnv = map[string]string{
	"PMIX_NAMESPACE":            "slurm.pmix.7.0",
	"PMIX_RANK":                 "2",
	"PMIX_SERVER_URI41":         "pmix-server.1;tcp4://127.0.0.1:4000",
	"SLURM_MPI_TYPE":            "pmix",
	"SLURMD_NODENAME":           "n2",
	"SLURM_LOCALID":             "0",
	"SLURM_NODEID":              "1",
	"SLURM_STEP_TASKS_PER_NODE": "2(x2)",
	"SLURM_STEP_NUM_TASKS":      "4",
	"SLURM_PROCID":              "2",
}

func TestPMIxContract(t *testing.T) {
	c, err := pmixContract(envOf(pmixEnv), true)
	if err != nil {
		t.Fatal(err)
	}
	want := Contract{PMI: true, PMIx: true, PMIFD: -1, PMIJob: "slurm.pmix.7.0", Job: "pmix-slurm.pmix.7.0",
		Rank: 2, LocalRank: 0, LocalSize: 2, Host: "n2"}
	if c.PMI != want.PMI || c.PMIx != want.PMIx || c.PMIFD != want.PMIFD || c.PMIJob != want.PMIJob ||
		c.Job != want.Job || c.Rank != want.Rank || c.LocalRank != want.LocalRank || c.LocalSize != want.LocalSize || c.Host != want.Host {
		t.Fatalf("got %+v\nwant %+v", c, want)
	}
	if c.Singleton() {
		t.Error("a PMIx rank is a singleton")
	}

	bad := map[string]string{"PMIX_NAMESPACE": "ns", "PMIX_RANK": "-1"}
	if _, err := pmixContract(envOf(bad), true); err == nil || !strings.Contains(err.Error(), "PMIX_RANK") {
		t.Errorf("PMIX_RANK=-1: %v, want an error naming PMIX_RANK", err)
	}
	// No PMIX_RANK: the server tells the rank at Init.
	if c, err := pmixContract(envOf(map[string]string{"PMIX_SERVER_URI4": "x"}), true); err != nil || c.Rank != -1 || !c.PMIx {
		t.Errorf("no PMIX_RANK: %+v, %v", c, err)
	}
}

// A build without the PMIx client refuses a PMIx start and names both fixes.
func TestPMIxContractWithoutClientNamesBothFixes(t *testing.T) {
	_, err := pmixContract(envOf(pmixEnv), false)
	if !errors.Is(err, ErrPMIxNotBuilt) {
		t.Fatalf("got %v, want ErrPMIxNotBuilt", err)
	}
	for _, fix := range []string{"CGO_ENABLED=1 go build -tags pmix", "srun --mpi=pmi2"} {
		if !strings.Contains(err.Error(), fix) {
			t.Errorf("%q does not name the fix %q", err, fix)
		}
	}
}

// ContractFromEnv takes the PMIx path in a build with the client and
// refuses it clearly in one without; PMI-2, when also offered, wins.
func TestContractFromEnvUnderPMIx(t *testing.T) {
	c, err := ContractFromEnv(envOf(pmixEnv))
	if pmix.Available {
		if err != nil || !c.PMIx || c.Rank != 2 {
			t.Fatalf("build with PMIx: %+v, %v", c, err)
		}
	} else if !errors.Is(err, ErrPMIxNotBuilt) {
		t.Fatalf("build without PMIx: %+v, %v, want ErrPMIxNotBuilt", c, err)
	}

	both := map[string]string{"PMI_FD": "5", "PMI_RANK": "1", "PMI_SIZE": "2"}
	for k, v := range pmixEnv {
		both[k] = v
	}
	if c, err := ContractFromEnv(envOf(both)); err != nil || c.PMIx || !c.PMI || c.PMIFD != 5 || c.Rank != 1 {
		t.Errorf("PMI-2 and PMIx both offered: %+v, %v, want PMI-2", c, err)
	}

	// srun --mpi=pmix that passed no server address cannot go on as
	// singletons.
	noServer := map[string]string{"SLURM_MPI_TYPE": "pmix", "SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1"}
	if _, err := ContractFromEnv(envOf(noServer)); err == nil || !strings.Contains(err.Error(), "srun --mpi=pmi2") {
		t.Errorf("srun --mpi=pmix without a server: %v, want advice to use --mpi=pmi2", err)
	}
}
