#!/bin/bash
# fault.sh — inject and heal faults on one host of a cluster made by up.sh.
#
# Usage: e2e/cluster/fault.sh HOST ACTION [ARG]
#   freeze       SIGSTOP every process of HOST (sshd included): TCP connects
#                still succeed (the kernel answers) but nothing replies
#   thaw         SIGCONT them again
#   down | up    take HOST's link (its veth on the bridge) down / up
#   loss PCT     drop PCT% of HOST's packets on its link at random, each
#                direction (nftables numgen; this kernel has no netem);
#                its loopback, which no wire carries, loses nothing
#   reject       answer new TCP connections to HOST's port 22 with a reset
#   drop-from IP drop everything HOST receives from IP (a one-way partition)
#   heal         remove every nftables fault (loss, reject, drop-from)
# HOST is a namespace name such as jh2. Runs as root.
set -euo pipefail
die() { echo "fault.sh: $*" >&2; exit 1; }
[ $# -ge 2 ] || die "usage: fault.sh HOST freeze|thaw|down|up|loss PCT|reject|drop-from IP|heal"
h=$1 action=$2
[[ $h =~ ^[a-z]{1,6}[0-9]+$ ]] || die "bad host name $h"
ip netns list | awk '{print $1}' | grep -qx "$h" || die "no such host: $h"

nft_table() {   # create the fault table (input and output chains) if missing
  ip netns exec "$h" nft -f - <<'NFT'
table inet jhfault {
  chain in  { type filter hook input  priority 0; policy accept; }
  chain out { type filter hook output priority 0; policy accept; }
}
NFT
}

case $action in
freeze|thaw)
  sig=STOP; [ "$action" = thaw ] && sig=CONT
  # twice: a process forked while the first pass ran is caught by the second
  for _ in 1 2; do
    pids=$(ip netns pids "$h")
    # shellcheck disable=SC2086 # a list of pids
    [ -z "$pids" ] || kill -s "$sig" $pids 2>/dev/null || true
  done ;;
down|up)
  ip link set "$h-br" "$action" ;;
loss)
  pct=${3:-}
  if ! [[ $pct =~ ^[0-9]+$ ]] || [ "$pct" -gt 100 ]; then die "loss PCT: want 0..100, got '$pct'"; fi
  nft_table
  ip netns exec "$h" nft flush chain inet jhfault in
  ip netns exec "$h" nft flush chain inet jhfault out
  if [ "$pct" -eq 100 ]; then
    ip netns exec "$h" nft add rule inet jhfault in iifname != lo counter drop
    ip netns exec "$h" nft add rule inet jhfault out oifname != lo counter drop
  elif [ "$pct" -gt 0 ]; then
    ip netns exec "$h" nft add rule inet jhfault in iifname != lo numgen random mod 100 '<' "$pct" counter drop
    ip netns exec "$h" nft add rule inet jhfault out oifname != lo numgen random mod 100 '<' "$pct" counter drop
  fi ;;
reject)
  nft_table
  ip netns exec "$h" nft add rule inet jhfault in tcp dport 22 tcp flags syn reject with tcp reset ;;
drop-from)
  src=${3:-}
  [[ $src =~ ^10\.77\.[0-9]+\.[0-9]+$ ]] || die "drop-from IP: want a test address 10.77.X.Y, got '$src'"
  nft_table
  ip netns exec "$h" nft add rule inet jhfault in ip saddr "$src" drop ;;
heal)
  ip netns exec "$h" nft delete table inet jhfault 2>/dev/null || true ;;
*)
  die "unknown action $action" ;;
esac
