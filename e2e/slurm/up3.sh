#!/bin/bash
# up3.sh — a real multi-node Slurm on the namespace hosts of e2e/cluster/up.sh
# (root only): slurmctld and a private munged in the root namespace (the login
# node), one slurmd per host, NodeName = the host's name (jh1, jh2, …).
#
# Each slurmd runs in the same network, mount and UTS namespaces as its host's
# sshd, so ranks started by Slurm see the host's own address, hostname, /tmp
# and /root, exactly as ranks started over SSH do.
#
# Nothing is shared with the single-machine Slurm of up.sh, so both can be up
# at once: this one has its own slurm.conf (clients need SLURM_CONF, see
# below), its own slurmctld port, its own munged (socket, key, pid, seed) and
# its own state directory; nothing goes to /etc or /run.
#
# Usage (environment, defaults shown):
#   JH_PREFIX=jh                              the cluster's host name prefix
#   JH_STATE=/var/tmp/jiarun-cluster/$JH_PREFIX   the cluster's state dir
#   SL_STATE=/var/tmp/jiarun-slurm3/$JH_PREFIX    this Slurm's state dir
#   SL_PORT=7000+X   slurmctld's port, X = the third octet of the cluster's
#                    subnet 10.77.X.0/24 (so clusters never share a port)
#   SL_CPUS=2        CPUs per node
# When the cluster is not up, up3.sh brings it up first (JH_N=3 hosts, JH_NET,
# as e2e/cluster/up.sh) and down3.sh then tears it down too.
#
#   sudo e2e/slurm/up3.sh
#   export SLURM_CONF=/var/tmp/jiarun-slurm3/jh/slurm.conf
#   salloc -N 3 --ntasks-per-node=2 jiarun ./hello
#   sudo e2e/slurm/down3.sh
#
# Files in $SL_STATE: slurm.conf, env (SLURM_CONF=…), hosts (node names),
# slurmctld.{pid,log}, slurmd-NODE.{pid,log}, spool-NODE/, ctld/, munge/,
# own-cluster (when up3.sh brought the hosts up).
# On any failure up3.sh tears down what it built and exits non-zero.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
P=${JH_PREFIX:-jh}
JH=${JH_STATE:-/var/tmp/jiarun-cluster/$P}
S=${SL_STATE:-/var/tmp/jiarun-slurm3/$P}
CPUS=${SL_CPUS:-2}

die() { echo "up3.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (Slurm daemons, namespaces)"
[[ $P =~ ^[a-z]{1,6}$ ]] || die "JH_PREFIX=$P: want 1-6 lowercase letters"
if ! [[ $CPUS =~ ^[0-9]+$ ]] || [ "$CPUS" -lt 1 ]; then die "SL_CPUS=$CPUS: want a positive number"; fi
case "$S" in /tmp|/tmp/*) die "SL_STATE=$S: must not be under /tmp (each host has its own /tmp)";; esac
if [ -s "$S/slurmctld.pid" ] && kill -0 "$(cat "$S/slurmctld.pid")" 2>/dev/null; then
  die "the Slurm of cluster $P is already up (slurmctld $(cat "$S/slurmctld.pid")); run down3.sh first"
fi

# 0. packages (one installer at a time: a flock on this script)
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  exec 9<"$0"
  flock 9
  if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    echo "up3.sh: installing slurm-wlm munge" >&2
    apt-get -qq -o DPkg::Lock::Timeout=600 update
    DEBIAN_FRONTEND=noninteractive apt-get -y -qq -o DPkg::Lock::Timeout=600 \
      install --no-install-recommends slurm-wlm munge >/dev/null
  fi
  exec 9<&-
fi

mkdir -p "$S"
# From here on, a failure tears down whatever was built.
# shellcheck disable=SC2154 # rc is assigned inside the trap
trap 'rc=$?; echo "up3.sh: failed (rc=$rc) at line $LINENO; tearing down" >&2
      JH_PREFIX=$P JH_STATE=$JH SL_STATE=$S "$HERE/down3.sh" >&2; exit $rc' ERR

# 1. the hosts: the cluster's, or a new one
if [ ! -s "$JH/hosts" ]; then
  JH_N=${JH_N:-3} JH_PREFIX=$P JH_STATE=$JH "$HERE/../cluster/up.sh" >/dev/null
  touch "$S/own-cluster"
fi
mapfile -t names < <(awk '{print $1}' "$JH/hosts")
mapfile -t addrs < <(awk '{print $2}' "$JH/hosts")
N=${#names[@]}
[ "$N" -ge 1 ] || die "no hosts in $JH/hosts"
NET=${addrs[0]%.*}                 # 10.77.X
LOGIN=$NET.1                       # the bridge: the login node's address
X=${NET##*.}
PORT=${SL_PORT:-$((7000 + X))}
printf '%s\n' "${names[@]}" > "$S/hosts"
CONF=$S/slurm.conf
echo "SLURM_CONF=$CONF" > "$S/env"
export SLURM_CONF=$CONF

# 2. a private munged (its socket is a path, so it serves every namespace)
M=$S/munge
install -d -o munge -g munge -m 0755 "$M"
mungekey --create --force --keyfile="$M/munge.key" 2>/dev/null
chown munge:munge "$M/munge.key"
chmod 0400 "$M/munge.key"
runuser -u munge -- /usr/sbin/munged --socket="$M/munge.socket" --key-file="$M/munge.key" \
  --pid-file="$M/munged.pid" --log-file="$M/munged.log" --seed-file="$M/munged.seed"

# 3. slurm.conf: nodes NAME[i] at their addresses, slurmctld on the bridge
nodes=$(IFS=,; echo "${names[*]}")
{
  cat <<CFG
ClusterName=jia$P
SlurmctldHost=$(hostname -s)($LOGIN)
SlurmctldPort=$PORT
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$M/munge.socket
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
SlurmdSpoolDir=$S/spool-%n
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd-%n.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd-%n.log
CFG
  for i in "${!names[@]}"; do
    echo "NodeName=${names[$i]} NodeAddr=${addrs[$i]} CPUs=$CPUS RealMemory=1000 State=UNKNOWN"
  done
  echo "PartitionName=debug Nodes=$nodes Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4"
} > "$CONF"
mkdir -p "$S/ctld"

# 4. the daemons (each daemonizes and writes its pid file)
/usr/sbin/slurmctld -f "$CONF"
for ns in "${names[@]}"; do
  mkdir -p "$S/spool-$ns"
  # Join the host's sshd's namespaces. ip-netns-exec remounted /sys there,
  # hiding /sys/fs/cgroup, and slurmd 22.05 will not start without a cgroup
  # file system (even with proctrack/linuxproc): give it a v1 layout, a
  # tmpfs with the existing name=systemd hierarchy.
  nsenter -t "$(cat "$JH/$ns/sshd.pid")" -n -m -u -- /bin/sh -c "
    set -e
    if ! mountpoint -q /sys/fs/cgroup; then
      mount -t tmpfs -o mode=755 jiarun-cgroup /sys/fs/cgroup
      mkdir /sys/fs/cgroup/systemd
      mount -t cgroup -o none,name=systemd jiarun-cgroup /sys/fs/cgroup/systemd
    fi
    exec /usr/sbin/slurmd -f '$CONF' -N '$ns'"
done

# 5. wait until every node is idle
ok=
for _ in $(seq 1 200); do
  if [ "$(sinfo -h -t idle -o %D 2>/dev/null)" = "$N" ]; then ok=1; break; fi
  sleep 0.1
done
if [ -z "$ok" ]; then
  echo "up3.sh: the nodes did not become idle:" >&2
  sinfo -N >&2 || true
  tail -n 20 "$S"/slurmctld.log "$S"/slurmd-*.log >&2 || true
  false
fi
trap - ERR
sinfo -N
