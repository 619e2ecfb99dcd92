#!/bin/bash
# down.sh — tear down a test cluster made by up.sh. Always safe to run: after
# a full or partial bring-up, twice in a row, or when nothing is up.
#
# Usage: same environment as up.sh (JH_PREFIX, JH_STATE; JH_N is not needed):
#   JH_PREFIX=jh e2e/cluster/down.sh
#
# Every process in each host namespace (sshd, sessions, anything they started,
# frozen ones too) is killed by PID, then the namespaces, the bridge, leftover
# veths and the state directory are removed. Bind mounts and nftables tables
# live only inside the namespaces and vanish with them.
P=${JH_PREFIX:-jh}
S=${JH_STATE:-/var/tmp/jiarun-cluster/$P}
BR=${P}br0
[[ $P =~ ^[a-z]{1,6}$ ]] || { echo "down.sh: JH_PREFIX=$P: want 1-6 lowercase letters" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "down.sh: needs root" >&2; exit 1; }

nss=$(ip netns list 2>/dev/null | awk -v re="^${P}[0-9]+\$" '$1 ~ re {print $1}')
for ns in $nss; do
  # the listener first (pid file), then everything else in the namespace
  if [ -s "$S/$ns/sshd.pid" ]; then kill "$(cat "$S/$ns/sshd.pid")" 2>/dev/null; fi
  pids=$(ip netns pids "$ns" 2>/dev/null)
  # shellcheck disable=SC2086 # word splitting of the pid list is intended
  if [ -n "$pids" ]; then kill $pids 2>/dev/null; kill -CONT $pids 2>/dev/null; fi
done
for ns in $nss; do
  for _ in $(seq 1 40); do [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break; sleep 0.05; done
  pids=$(ip netns pids "$ns" 2>/dev/null)
  # shellcheck disable=SC2086
  [ -n "$pids" ] && kill -9 $pids 2>/dev/null
  ip netns del "$ns" 2>/dev/null   # takes eth0 with it, and so its veth peer NAME-br
done
ip link del "$BR" 2>/dev/null
for l in $(ip -br link 2>/dev/null | awk -v re="^${P}[0-9]+-(br|ns)(@|\$)" '$1 ~ re {sub(/@.*/, "", $1); print $1}'); do
  ip link del "$l" 2>/dev/null
done
rm -rf "$S"
rmdir "$(dirname "$S")" 2>/dev/null   # the parent, when nothing else (locks, other clusters) is in it
# report what is left, if anything, and fail then
left=$(ip netns list 2>/dev/null | awk -v re="^${P}[0-9]+\$" '$1 ~ re {print $1}')
if [ -n "$left" ] || ip link show "$BR" >/dev/null 2>&1 || [ -e "$S" ]; then
  echo "down.sh: could not remove everything: namespaces [$left]" >&2
  exit 1
fi
exit 0
