#!/bin/bash
# down.sh — stop what up.sh started, by pid, and remove its files. Safe to run
# after a partial bring-up or twice.
S=${STATE:-/var/tmp/jiarun-slurm}
command -v scancel >/dev/null && scancel --user=root 2>/dev/null
stop() { # stop PIDFILE: TERM, wait until gone (or a zombie), then KILL
  [ -s "$1" ] || return 0
  local p; p=$(cat "$1"); kill "$p" 2>/dev/null || return 0
  for _ in $(seq 1 100); do
    case "$(ps -o stat= -p "$p" 2>/dev/null)" in ""|Z*) return 0;; esac
    sleep 0.05
  done
  kill -9 "$p" 2>/dev/null
}
stop "$S/slurmd.pid"
stop "$S/slurmctld.pid"
stop /run/munge/munged.pid
rm -rf "$S" /etc/slurm/slurm.conf /run/munge
exit 0
