#!/bin/bash
# up.sh — a single-machine Slurm (munged, slurmctld, slurmd on this host) for
# the end-to-end tests. Installs slurm-wlm and munge, and what building with
# -tags pmix needs, when missing. Needs root.
# Usage: CPUS=4 STATE=/var/tmp/jiarun-slurm e2e/slurm/up.sh ; e2e/slurm/down.sh
set -euo pipefail
S=${STATE:-/var/tmp/jiarun-slurm}
CPUS=${CPUS:-$(nproc)}
H=$(hostname -s)

# Programs built with -tags pmix (for srun --mpi=pmix) need the PMIx
# development files, pkg-config and a C compiler.
pkgs=()
{ command -v slurmctld && command -v munged; } >/dev/null || pkgs+=(slurm-wlm munge)
pkg-config --exists pmix 2>/dev/null || pkgs+=(libpmix-dev pkg-config)
command -v gcc >/dev/null || pkgs+=(gcc libc6-dev)
if [ ${#pkgs[@]} -gt 0 ]; then
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi
mkdir -p "$S/ctld" "$S/spool"

install -d -o munge -g munge -m 0755 /run/munge
mungekey --create --force --keyfile=/etc/munge/munge.key
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
runuser -u munge -- /usr/sbin/munged

mkdir -p /etc/slurm
cat > /etc/slurm/slurm.conf <<CFG
ClusterName=jiatest
SlurmctldHost=$H
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=30
KillWait=5
StateSaveLocation=$S/ctld
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd.log
NodeName=$H CPUs=$CPUS RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CFG

/usr/sbin/slurmctld
/usr/sbin/slurmd

for _ in $(seq 1 200); do
  st=$(sinfo -h -n "$H" -o %t 2>/dev/null || true)
  case "$st" in idle|mix|alloc) exit 0;; esac
  sleep 0.1
done
echo "slurm: node $H did not become idle (state '$st'); see $S/slurmctld.log and $S/slurmd.log" >&2
exit 1
