package pmix

// ServerEnv names the environment variables a PMIx server (Slurm's
// mpi/pmix plugin, PRRTE, Open MPI's launchers) sets in the environment of
// the processes it starts: the process's namespace and rank, and the
// server's address in the forms of the successive PMIx versions.
var ServerEnv = []string{
	"PMIX_NAMESPACE",
	"PMIX_RANK",
	"PMIX_SERVER_URI",
	"PMIX_SERVER_URI2",
	"PMIX_SERVER_URI21",
	"PMIX_SERVER_URI3",
	"PMIX_SERVER_URI4",
	"PMIX_SERVER_URI41",
}

// Started reports whether the environment read through getenv is that of
// a process started by a PMIx server: any of ServerEnv is set.
func Started(getenv func(string) string) bool {
	for _, name := range ServerEnv {
		if getenv(name) != "" {
			return true
		}
	}
	return false
}
