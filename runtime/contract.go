package runtime

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/jiarun/jia/runtime/pmix"
)

// Environment variables of the launch contract. jiarun (or a proxy acting for
// it) sets them in every rank's environment; a program that finds none of
// them runs as a singleton, rank 0 of 1.
const (
	EnvRank       = "JIA_RANK"       // this rank, 0 ≤ rank < size
	EnvSize       = "JIA_SIZE"       // number of ranks in the job
	EnvLocalRank  = "JIA_LOCAL_RANK" // index of this rank among the ranks on its host
	EnvLocalSize  = "JIA_LOCAL_SIZE" // number of ranks on this rank's host
	EnvJob        = "JIA_JOB"        // job identifier, unique per launch
	EnvRendezvous = "JIA_RENDEZVOUS" // host:port of the rendezvous server
	EnvSecret     = "JIA_SECRET"     // per-job secret, hex encoded
	EnvHost       = "JIA_HOST"       // name of the host in the launcher's host list
	EnvConfig     = "JIA_CONFIG_DATA"
	// EnvConfig holds the job's resolved configuration as TOML text.
	EnvAddr = "JIA_ADDR" // IP address the rank listens on and publishes (default: toward the rendezvous)
)

// SecretLen is the length in bytes of a per-job secret.
const SecretLen = 32

// Contract is what a rank learns from its environment at start.
type Contract struct {
	Rank, Size           int
	LocalRank, LocalSize int
	Job                  string
	Rendezvous           string
	Secret               []byte
	Host                 string
	// Addr is the IP address the rank listens on and publishes; empty means
	// the address of the interface that reaches the rendezvous.
	Addr string
	// Config is the resolved configuration (TOML) chosen by the launcher,
	// empty when the rank runs as a singleton.
	Config string
	// PMI is set when the rank was started by a process manager (srun
	// --mpi=pmi2 or --mpi=pmix, Hydra, Open MPI's launchers) instead of
	// jiarun. PMIx is also set when that process manager speaks PMIx rather
	// than PMI-2. For PMI-2, PMIFD is the descriptor it passed, or -1 with
	// PMIPort (host:port) set instead. PMIJob is the process manager's name
	// for the job (PMI-2 job id, PMIx namespace).
	PMI     bool
	PMIx    bool
	PMIFD   int
	PMIPort string
	PMIJob  string
}

// Singleton reports whether c describes a program started alone, by neither
// jiarun nor a process manager.
func (c Contract) Singleton() bool { return c.Rendezvous == "" && !c.PMI }

// Environ returns the contract as KEY=VALUE strings to append to a rank's
// environment.
func (c Contract) Environ() []string {
	env := []string{
		EnvRank + "=" + strconv.Itoa(c.Rank),
		EnvSize + "=" + strconv.Itoa(c.Size),
		EnvLocalRank + "=" + strconv.Itoa(c.LocalRank),
		EnvLocalSize + "=" + strconv.Itoa(c.LocalSize),
		EnvJob + "=" + c.Job,
		EnvRendezvous + "=" + c.Rendezvous,
		EnvSecret + "=" + hex.EncodeToString(c.Secret),
		EnvHost + "=" + c.Host,
	}
	if c.Config != "" {
		env = append(env, EnvConfig+"="+c.Config)
	}
	if c.Addr != "" {
		env = append(env, EnvAddr+"="+c.Addr)
	}
	return env
}

// ContractFromEnv reads the launch contract through getenv (os.Getenv in a
// real rank). With no JIA_RANK and no JIA_RENDEZVOUS it returns the singleton
// contract. A partial or malformed contract is an error naming the variable.
func ContractFromEnv(getenv func(string) string) (Contract, error) {
	if getenv(EnvRendezvous) == "" && getenv(EnvRank) == "" {
		return contractFromProcessManager(getenv)
	}
	var c Contract
	var err error
	num := func(name string, min int) int {
		if err != nil {
			return 0
		}
		v := getenv(name)
		n, perr := strconv.Atoi(v)
		if perr != nil || n < min {
			err = fmt.Errorf("launch contract: %s=%q is not an integer ≥ %d", name, v, min)
		}
		return n
	}
	c.Rank = num(EnvRank, 0)
	c.Size = num(EnvSize, 1)
	c.LocalRank = num(EnvLocalRank, 0)
	c.LocalSize = num(EnvLocalSize, 1)
	if err != nil {
		return Contract{}, err
	}
	if c.Rank >= c.Size {
		return Contract{}, fmt.Errorf("launch contract: %s=%d is not below %s=%d", EnvRank, c.Rank, EnvSize, c.Size)
	}
	if c.LocalRank >= c.LocalSize {
		return Contract{}, fmt.Errorf("launch contract: %s=%d is not below %s=%d", EnvLocalRank, c.LocalRank, EnvLocalSize, c.LocalSize)
	}
	c.Job = getenv(EnvJob)
	c.Rendezvous = getenv(EnvRendezvous)
	c.Host = getenv(EnvHost)
	c.Config = getenv(EnvConfig)
	c.Addr = getenv(EnvAddr)
	if c.Addr != "" && net.ParseIP(c.Addr) == nil {
		return Contract{}, fmt.Errorf("launch contract: %s=%q is not an IP address", EnvAddr, c.Addr)
	}
	for _, req := range []struct{ name, val string }{{EnvJob, c.Job}, {EnvRendezvous, c.Rendezvous}} {
		if strings.TrimSpace(req.val) == "" {
			return Contract{}, fmt.Errorf("launch contract: %s is not set", req.name)
		}
	}
	sec := getenv(EnvSecret)
	c.Secret, err = hex.DecodeString(sec)
	if err != nil || len(c.Secret) != SecretLen {
		return Contract{}, fmt.Errorf("launch contract: %s is not %d hex-encoded bytes", EnvSecret, SecretLen)
	}
	return c, nil
}

// contractFromProcessManager reads the contract of a rank started by a PMI-2
// or PMIx process manager, or returns the singleton contract. A program
// started by srun in a way that would silently make every task a singleton
// is an error that says how to start it.
func contractFromProcessManager(getenv func(string) string) (Contract, error) {
	fd, port := getenv("PMI_FD"), getenv("PMI_PORT")
	if fd == "" && port == "" {
		if pmix.Started(getenv) {
			return pmixContract(getenv, pmix.Available)
		}
		ntasks, _ := strconv.Atoi(getenv("SLURM_STEP_NUM_TASKS"))
		switch {
		case getenv("SLURM_MPI_TYPE") == "pmix":
			return Contract{}, errors.New("started by srun --mpi=pmix, but srun passed no PMIx server address (PMIX_SERVER_URI*): start the job with srun --mpi=pmi2 (or with jiarun)")
		case ntasks > 1 && getenv("SLURM_PROCID") != "":
			return Contract{}, fmt.Errorf("started by srun as task %s of %d without a process-management interface, so every task would run alone as rank 0 of 1: start the job with srun --mpi=pmi2 (or with jiarun)", getenv("SLURM_PROCID"), ntasks)
		}
		return Contract{Rank: 0, Size: 1, LocalRank: 0, LocalSize: 1, Job: "singleton", Host: "localhost"}, nil
	}
	c := Contract{PMI: true, PMIFD: -1, PMIPort: port, PMIJob: getenv("PMI_JOBID"), Rank: -1}
	if fd != "" {
		n, err := strconv.Atoi(fd)
		if err != nil || n < 0 {
			return Contract{}, fmt.Errorf("process manager contract: PMI_FD=%q is not a descriptor", fd)
		}
		c.PMIFD = n
	}
	if r := getenv("PMI_RANK"); r != "" {
		n, err := strconv.Atoi(r)
		if err != nil || n < 0 {
			return Contract{}, fmt.Errorf("process manager contract: PMI_RANK=%q is not a rank", r)
		}
		c.Rank = n
	}
	c.Size, _ = strconv.Atoi(getenv("PMI_SIZE"))
	c.Job = "pmi-" + c.PMIJob
	slurmPlacement(&c, getenv)
	return c, nil
}

// ErrPMIxNotBuilt is the error of a program started by a PMIx process
// manager but built without the PMIx client.
var ErrPMIxNotBuilt = errors.New("started by a PMIx process manager (srun --mpi=pmix), but this program was built without PMIx support: " +
	"rebuild it with `CGO_ENABLED=1 go build -tags pmix`, or start it with srun --mpi=pmi2 (or with jiarun)")

// pmixContract reads the contract of a rank started by a PMIx server. The
// rank is PMIX_RANK; the size, and the rank's place on its node, come from
// the server at Init. withClient tells whether this build has the PMIx
// client; without it the contract is ErrPMIxNotBuilt.
func pmixContract(getenv func(string) string, withClient bool) (Contract, error) {
	if !withClient {
		return Contract{}, ErrPMIxNotBuilt
	}
	c := Contract{PMI: true, PMIx: true, PMIFD: -1, PMIJob: getenv("PMIX_NAMESPACE"), Rank: -1}
	if r := getenv("PMIX_RANK"); r != "" {
		n, err := strconv.Atoi(r)
		if err != nil || n < 0 {
			return Contract{}, fmt.Errorf("process manager contract: PMIX_RANK=%q is not a rank", r)
		}
		c.Rank = n
	}
	c.Job = pmixJobName(c.PMIJob)
	slurmPlacement(&c, getenv)
	return c, nil
}

// pmixJobName is the job identifier of a rank in PMIx namespace ns.
func pmixJobName(ns string) string { return "pmix-" + ns }

// slurmPlacement sets the rank's host and its place among the ranks on it
// from what Slurm tells every task; without Slurm, the rank is alone on its
// host until the process manager says otherwise.
func slurmPlacement(c *Contract, getenv func(string) string) {
	c.Host = getenv("SLURMD_NODENAME")
	c.LocalRank, _ = strconv.Atoi(getenv("SLURM_LOCALID"))
	c.LocalSize = slurmTasksOnNode(getenv("SLURM_STEP_TASKS_PER_NODE"), getenv("SLURM_NODEID"))
	if c.LocalSize <= c.LocalRank {
		c.LocalRank, c.LocalSize = 0, 1
	}
}

// slurmTasksOnNode reads Slurm's compressed tasks-per-node list ("2(x3),1")
// for node index id; 0 when it cannot tell.
func slurmTasksOnNode(list, id string) int {
	node, err := strconv.Atoi(id)
	if err != nil || list == "" {
		return 0
	}
	for _, part := range strings.Split(list, ",") {
		count, rep := part, 1
		if i := strings.Index(part, "(x"); i >= 0 && strings.HasSuffix(part, ")") {
			count = part[:i]
			rep, err = strconv.Atoi(part[i+2 : len(part)-1])
			if err != nil {
				return 0
			}
		}
		n, err := strconv.Atoi(count)
		if err != nil {
			return 0
		}
		if node < rep {
			return n
		}
		node -= rep
	}
	return 0
}
