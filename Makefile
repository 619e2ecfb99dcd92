# jiarun — build, demo, test, benchmarks.
GO      ?= go
APPS    := $(notdir $(patsubst %/,%,$(dir $(wildcard apps/*/main.go))))
BINS    := $(APPS:%=bin/%)
MPICC   ?= mpicc.openmpi
MPIRUN  ?= mpirun.openmpi
# Static binaries start faster (no dynamic loader); the verbs provider, which
# needs cgo, is built with `make TAGS=verbs CGO_ENABLED=1`.
export CGO_ENABLED ?= 0
TAGS    ?=
GOFLAGS_BUILD := -tags 'urfave_cli_no_docs $(TAGS)'

.PHONY: all build demo test test-allocs test-deps vet fmt-check e2e bench bench-rdmaio bench-comm-tcp bench-startup bench-ssh bench-tree bench-npb bench-comm bench-dsm bench-dsm-tcp bench-deps clean FORCE

all: build

build: jiarun $(BINS)

jiarun: FORCE
	$(GO) build $(GOFLAGS_BUILD) -o jiarun ./cmd/jiarun

bin/%: FORCE
	$(GO) build $(GOFLAGS_BUILD) -o $@ ./apps/$*

# The main job on this machine: hello, then the NAS suite (every kernel,
# class S, 4 ranks) with one summary table.
demo: build bin/nassuite
	./jiarun -np 4 ./bin/hello
	./bin/nassuite -np 4 -class S -jiarun ./jiarun -bin ./bin

bin/nassuite: FORCE
	$(GO) build -o $@ ./bench/nassuite

bin/bench_mpi: bench/c/bench_mpi.c bench-deps
	$(MPICC) -O2 -o $@ bench/c/bench_mpi.c

# Message passing, OSU methodology: apps/bench under jiarun beside its C
# twin under Open MPI, same machine, same run, with the ratio; each side's
# best of 3 runs, the sides alternating (a virtual machine's speed drifts
# between runs); each table's title gives the range of the machine's
# cache-line ping-pong measured around its runs, which tells the regimes
# its small-message figures were measured in.
bench-comm: build bin/bench_mpi
	$(GO) build -o bin/mpicompare ./bench/mpicompare
	./bin/mpicompare -runs 3 -jiarun ./jiarun -bench ./bin/bench -mpirun $(MPIRUN) -mpibench ./bin/bench_mpi

# NAS class A at 1, 2 and 4 ranks, best of 3.
bench-npb: build bin/nassuite
	./bin/nassuite -np 1,2,4 -class A -best 3 -jiarun ./jiarun -bin ./bin

vet:
	$(GO) vet ./...

fmt-check:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Static checks, every unit test under the race detector, and the end-to-end
# tests of the real jiarun binary (package e2e).
test: fmt-check vet test-deps
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 20m ./...
	$(MAKE) --no-print-directory test-allocs
	CGO_ENABLED=1 $(GO) vet -tags pmix ./runtime/...
	CGO_ENABLED=1 $(GO) test -race -count=1 -tags pmix ./runtime/...
	CGO_ENABLED=1 $(GO) vet -tags verbs ./rdmaio/... ./runtime/... ./launcher/...
	CGO_ENABLED=1 $(GO) test -race -count=1 -tags verbs ./rdmaio/ ./rdmaio/verbs/ ./runtime/ ./launcher/

# The zero-allocation tests of the hot paths skip under the race detector
# (it allocates): run them without it, comm also over the RC queues.
test-allocs:
	$(GO) test -count=1 -run 'Alloc' ./comm/... ./rdmaio/... ./apps/internal/npb/ ./shmem/tcpnet/
	$(GO) test -count=1 -run 'Alloc' ./comm/ -args -comm.transport=q

# What the tests need beyond Go: a C compiler (cgo, the race detector) and
# the development files of the optional cgo parts (PMIx, libibverbs).
test-deps:
	@{ command -v gcc && command -v pkg-config && pkg-config --exists pmix && test -f /usr/include/infiniband/verbs.h; } >/dev/null 2>&1 || { \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		gcc libc6-dev pkg-config libpmix-dev libibverbs-dev; }

e2e:
	$(GO) test -count=1 -v ./e2e/

bench-deps:
	@command -v $(MPICC) >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openmpi-bin libopenmpi-dev; }

bin/hello_mpi: bench/c/hello_mpi.c bench-deps
	$(MPICC) -O2 -o $@ bench/c/hello_mpi.c

bench-startup: build bin/hello_mpi
	$(GO) build -o bin/startup ./bench/startup
	./bin/startup -np 4 -jiarun ./jiarun -hello ./bin/hello -mpirun $(MPIRUN) -mpihello ./bin/hello_mpi

# Message passing over TCP between two network-namespace hosts (needs root):
# jiarun (rdmaio tcp provider) beside Open MPI forced onto TCP
# (--mca btl tcp,self), same hosts, same run. Open MPI's --bind-to none:
# both "hosts" share this machine's cores, and binding would pin both ranks
# to core 0.
bench-comm-tcp: build bin/bench_mpi
	$(GO) build -o bin/mpicompare ./bench/mpicompare
	@if [ "$$(id -u)" != 0 ]; then echo "bench-comm-tcp: skipped: needs root for the namespace hosts"; exit 0; fi; \
	st=/var/tmp/jiarun-cluster/benchtcp; net=10.77.10; \
	JH_N=2 JH_PREFIX=jht JH_NET=$$net JH_STATE=$$st bash e2e/cluster/up.sh >/dev/null && \
	./bin/mpicompare -runs 3 -floor=false -tests latency,bw -title "two network-namespace hosts over TCP" \
		-jiarun ./jiarun -bench $(CURDIR)/bin/bench -mpirun $(MPIRUN) -mpibench $(CURDIR)/bin/bench_mpi \
		-jarg -H -jarg jht1:1,jht2:1 -jarg --bind-to -jarg none -jarg --ssh-config -jarg $$st/ssh_config \
		-marg -H -marg jht1,jht2 -marg --bind-to -marg none -marg --mca -marg plm_rsh_agent -marg "ssh -F $$st/ssh_config" \
		-marg --mca -marg btl -marg tcp,self -marg --mca -marg btl_tcp_if_include -marg $$net.0/24 \
		-marg --mca -marg oob_tcp_if_include -marg $$net.0/24; \
	rc=$$?; JH_PREFIX=jht JH_STATE=$$st bash e2e/cluster/down.sh >/dev/null; exit $$rc

# Start-up over SSH onto three network-namespace hosts (needs root; the
# cluster is brought up and torn down here; binaries are staged first).
bench-ssh: build
	$(GO) build -o bin/startup ./bench/startup
	@if [ "$$(id -u)" != 0 ]; then echo "bench-ssh: skipped: needs root for the namespace hosts"; exit 0; fi; \
	st=/var/tmp/jiarun-cluster/bench; \
	JH_N=3 JH_PREFIX=jhz JH_NET=10.77.9 JH_STATE=$$st bash e2e/cluster/up.sh >/dev/null && \
	./bin/startup -np 6 -mpirun "" -runs 20 -target 500ms -name "jiarun over SSH, 3 hosts x 2 slots, hello" \
		-args "-H jhz1:2,jhz2:2,jhz3:2 --ssh-config $$st/ssh_config" -jiarun ./jiarun -hello ./bin/hello; \
	rc=$$?; JH_PREFIX=jhz JH_STATE=$$st bash e2e/cluster/down.sh >/dev/null; exit $$rc

# Start-up against the number of hosts (1 to 32, simulated on this machine
# by the test launch agent): the proxy tree (--fanout 2) beside flat, as
# measured and with a modelled cost per SSH login (100 ms, as measured on
# the test cluster).
bench-tree: jiarun bin/hello
	$(GO) build -o bin/treebench ./bench/tree
	./bin/treebench -jiarun ./jiarun -hello ./bin/hello -agent e2e/testdata/local-agent \
		-hosts 1,2,4,8,16,32 -fanout 2 -runs 3 -cost 100ms

# The DSM: fault, lock and barrier costs at 2 and 4 ranks and the DSM
# applications at 1 and 2 ranks, in one table beside the JIAJIA 2.1 and
# M-JIAJIA figures measured on this kind of machine, and the machine's own
# floors (system call, wake-up, userfaultfd round trip).
bench-dsm: build
	./bin/dsmbench -drive -jiarun ./jiarun -bin ./bin -np 2,4 -runs 3

# The DSM between two network-namespace hosts over tcp (needs root; the
# cluster is brought up and torn down here). The namespace hosts share this
# machine's processors, so ranks are not bound (each host would put its
# rank on the same processor).
bench-dsm-tcp: build
	@if [ "$$(id -u)" != 0 ]; then echo "bench-dsm-tcp: skipped: needs root for the namespace hosts"; exit 0; fi; \
	st=/var/tmp/jiarun-cluster/benchdsm; \
	JH_N=2 JH_PREFIX=jhd JH_NET=10.77.11 JH_STATE=$$st bash e2e/cluster/up.sh >/dev/null && \
	./bin/dsmbench -drive -jiarun ./jiarun -bin $(CURDIR)/bin -np 2 -runs 3 -apps "" -hosts \
		-only read,write,home,lock,barrier,contended,diff \
		-jarg -H -jarg jhd1:1,jhd2:1 -jarg --bind-to -jarg none -jarg --ssh-config -jarg $$st/ssh_config; \
	rc=$$?; JH_PREFIX=jhd JH_STATE=$$st bash e2e/cluster/down.sh >/dev/null; exit $$rc

# rdmaio providers side by side (each with a peer process), beside a Go
# shared-memory spin ping-pong and a raw busy-polling TCP ping-pong.
bench-rdmaio:
	$(GO) build $(GOFLAGS_BUILD) -o bin/rdmaiobench ./bench/rdmaio
	./bin/rdmaiobench -runs 5

bench: bench-startup bench-rdmaio bench-comm bench-comm-tcp bench-ssh bench-tree bench-npb bench-dsm bench-dsm-tcp

clean:
	rm -rf jiarun bin

FORCE:
