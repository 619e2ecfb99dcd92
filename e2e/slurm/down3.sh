#!/bin/bash
# down3.sh — stop the Slurm of up3.sh and remove its files. Always safe to
# run: after a full or partial bring-up, twice in a row, or when nothing is up.
# Same environment as up3.sh (JH_PREFIX, JH_STATE, SL_STATE).
#
# Jobs are cancelled, then the daemons are stopped by PID (slurmd on every
# host, slurmctld, munged), then any slurmstepd left on a host. When up3.sh
# brought the hosts up too, they are torn down (e2e/cluster/down.sh), unless
# SL_KEEP_CLUSTER=1 (the Go tests bring the hosts up and down themselves).
# The script fails, naming them, if any of those processes is still there.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
P=${JH_PREFIX:-jh}
JH=${JH_STATE:-/var/tmp/jiarun-cluster/$P}
S=${SL_STATE:-/var/tmp/jiarun-slurm3/$P}
[[ $P =~ ^[a-z]{1,6}$ ]] || { echo "down3.sh: JH_PREFIX=$P: want 1-6 lowercase letters" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "down3.sh: needs root" >&2; exit 1; }
[ -d "$S" ] || exit 0
export SLURM_CONF=$S/slurm.conf

alive() { # alive PID: running and not a zombie (PID 1 reaps late here)
  case "$(ps -o stat= -p "$1" 2>/dev/null)" in ""|Z*) return 1;; esac
}
stop() { # stop PID: TERM, wait until gone, then KILL
  local p=$1
  kill "$p" 2>/dev/null || return 0
  for _ in $(seq 1 100); do alive "$p" || return 0; sleep 0.05; done
  kill -9 "$p" 2>/dev/null || return 0
  for _ in $(seq 1 40); do alive "$p" || return 0; sleep 0.05; done
}
pidof_file() { if [ -s "$1" ]; then cat "$1"; fi; }

# 1. jobs, while slurmctld still answers
ctld=$(pidof_file "$S/slurmctld.pid")
if [ -n "$ctld" ] && alive "$ctld" && [ -f "$SLURM_CONF" ]; then
  timeout 10 scancel --user=root 2>/dev/null || true
  for _ in $(seq 1 100); do
    [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null || true)" ] && break
    sleep 0.1
  done
fi

# 2. the daemons, by PID
pids=()
for f in "$S"/slurmd-*.pid; do
  [ -s "$f" ] || continue
  p=$(cat "$f"); pids+=("$p"); stop "$p"
done
if [ -n "$ctld" ]; then pids+=("$ctld"); stop "$ctld"; fi
m=$(pidof_file "$S/munge/munged.pid")
if [ -n "$m" ]; then pids+=("$m"); stop "$m"; fi

# 3. step daemons left on the hosts (they outlive slurmd by design)
if [ -s "$S/hosts" ]; then
  while read -r ns; do
    for p in $(ip netns pids "$ns" 2>/dev/null || true); do
      if [ "$(cat "/proc/$p/comm" 2>/dev/null || true)" = slurmstepd ]; then pids+=("$p"); stop "$p"; fi
    done
  done < "$S/hosts"
fi

# 4. the hosts, when up3.sh made them
if [ -e "$S/own-cluster" ] && [ "${SL_KEEP_CLUSTER:-}" != 1 ]; then
  JH_PREFIX=$P JH_STATE=$JH "$HERE/../cluster/down.sh" || true
fi

left=()
for p in ${pids[@]+"${pids[@]}"}; do
  if alive "$p"; then left+=("$p $(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null || true)"); fi
done
rm -rf "$S"
rmdir "$(dirname "$S")" 2>/dev/null || true
if [ ${#left[@]} -gt 0 ] || [ -e "$S" ]; then
  echo "down3.sh: could not stop everything:" >&2
  printf '  %s\n' "${left[@]}" >&2
  exit 1
fi
exit 0
