#!/bin/bash
# up.sh — bring up a test cluster of N "hosts" on this machine (root only).
#
# Each host is a network namespace PREFIX1..PREFIXn with its own address on a
# private /24, joined to the root namespace (the "login node") by a bridge, and
# its own sshd on port 22 (generated host keys, one authorized client key),
# its own hostname (UTS namespace) and its own /tmp and /root (bind mounts in
# its mount namespace), so a file "copied to the host" really lands in a
# per-host directory. Nothing listens outside the test /24 and the namespaces
# have no default route: no traffic can leave the machine.
#
# Usage (all settings are environment variables, defaults shown):
#   JH_N=3 JH_PREFIX=jh JH_NET=10.77.0 e2e/cluster/up.sh
#   JH_STATE=/var/tmp/jiarun-cluster/$JH_PREFIX   state dir, never under /tmp
#
# Layout (defaults):
#   root ns: bridge jhbr0 10.77.0.1/24
#   ns jhN:  eth0 10.77.0.(10+N)/24, lo, sshd on 10.77.0.(10+N):22, hostname jhN
#   $JH_STATE/id_ed25519{,.pub}   client key, authorized on every host
#   $JH_STATE/known_hosts         "10.77.0.11,jh1 ssh-ed25519 ..." (ed25519 only, on
#                                 purpose: the sshds also offer an ECDSA key)
#   $JH_STATE/ssh_config          Host aliases jhN -> addresses, key, known_hosts
#   $JH_STATE/hosts               one line per host: "name address sshd-pid"
#   $JH_STATE/owner               $JH_OWNER ("manual" by default; "go-test" from cluster.Up)
#   $JH_STATE/jhN/{sshd_config,ssh_host_*_key,sshd.pid,sshd.log,tmp/,home/}
# Every host's /root/.ssh has the same key, known_hosts and config, so a
# session on one host can ssh to the others by alias (tree fan-out).
#
# up.sh refuses to run when the cluster (its bridge) already exists; on any
# failure it tears down what it built (down.sh) and exits non-zero.
# Missing packages (openssh-server, nftables) are installed with apt-get.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
N=${JH_N:-3}
P=${JH_PREFIX:-jh}
NET=${JH_NET:-10.77.0}
S=${JH_STATE:-/var/tmp/jiarun-cluster/$P}
BR=${P}br0

die() { echo "up.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (network namespaces, bind mounts)"
if ! [[ $N =~ ^[0-9]+$ ]] || [ "$N" -lt 1 ] || [ "$N" -gt 200 ]; then die "JH_N=$N: want 1..200"; fi
[[ $P =~ ^[a-z]{1,6}$ ]] || die "JH_PREFIX=$P: want 1-6 lowercase letters"
[[ $NET =~ ^10\.77\.[0-9]{1,3}$ ]] || die "JH_NET=$NET: want 10.77.X (the private test range)"
case "$S" in /tmp|/tmp/*) die "JH_STATE=$S: must not be under /tmp (each host gets its own /tmp)";; esac
ip link show "$BR" >/dev/null 2>&1 && die "cluster $P is already up (bridge $BR exists); run down.sh first"

# 0. tools: install what is missing. One installer at a time (test packages
# bring clusters up in parallel): a flock on this script, which leaves no file.
# policy-rc.d keeps the package from starting a system-wide sshd on port 22.
missing() {
  need=()
  [ -x /usr/sbin/sshd ] || need+=(openssh-server)
  command -v ssh-keygen >/dev/null || need+=(openssh-client)
  command -v nft >/dev/null || need+=(nftables)
  command -v ip >/dev/null || need+=(iproute2)
  command -v nsenter >/dev/null || need+=(util-linux)
}
missing
if [ ${#need[@]} -gt 0 ]; then
  exec 9<"$0"
  flock 9
  missing
  if [ ${#need[@]} -gt 0 ]; then
    echo "up.sh: installing ${need[*]}" >&2
    own_policy=
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && own_policy=1
    fi
    rc=0
    { apt-get -qq -o DPkg::Lock::Timeout=600 update &&
      DEBIAN_FRONTEND=noninteractive apt-get -y -qq -o DPkg::Lock::Timeout=600 \
        install --no-install-recommends "${need[@]}" >/dev/null; } || rc=$?
    [ -n "$own_policy" ] && rm -f /usr/sbin/policy-rc.d
    [ $rc = 0 ] || die "apt-get install ${need[*]} failed (rc=$rc)"
  fi
  exec 9<&-
fi

# From here on, a failure tears down whatever was built.
trap 'rc=$?; echo "up.sh: failed (rc=$rc) at line $LINENO; tearing down" >&2
      JH_N=$N JH_PREFIX=$P JH_NET=$NET JH_STATE=$S "$HERE/down.sh" >&2; exit $rc' ERR

# (a parallel down.sh may rmdir an empty parent between mkdir -p's steps: retry)
for _ in 1 2 3 4 5; do mkdir -p "$S" 2>/dev/null && break; sleep 0.02; done
mkdir -p "$S" /run/sshd              # /run/sshd: sshd's privilege-separation dir
chmod 0755 /run/sshd
rm -f "$S/hosts"
echo "${JH_OWNER:-manual}" > "$S/owner"   # Go's cluster.Up reclaims only its own

# 1. the client key the launcher (and every host) uses
[ -f "$S/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C "jiarun-test-$P" -f "$S/id_ed25519"
: > "$S/known_hosts"

# 2. bridge in the root ns = the login node, address .1
ip link add "$BR" type bridge
ip addr add "$NET.1/24" dev "$BR"
ip link set "$BR" up

# 3. client config usable from the login node (and, rewritten, from every host)
cat > "$S/ssh_config" <<CFG
Host $P* $NET.*
  User root
  IdentityFile $S/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $S/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 5
  LogLevel ERROR
CFG
for i in $(seq 1 "$N"); do
  printf 'Host %s%s\n  HostName %s.%s\n' "$P" "$i" "$NET" $((10 + i)) >> "$S/ssh_config"
done

for i in $(seq 1 "$N"); do
  ns=$P$i ip=$NET.$((10 + i)) d=$S/$P$i
  mkdir -p "$d/tmp" "$d/home/.ssh"
  chmod 1777 "$d/tmp"; chmod 0700 "$d/home" "$d/home/.ssh"

  # 4. namespace + veth pair: NAME-br stays on the bridge, NAME-ns becomes eth0
  ip netns add "$ns"
  ip link add "$ns-br" type veth peer name "$ns-ns"
  ip link set "$ns-br" master "$BR" up
  ip link set "$ns-ns" netns "$ns"
  ip -n "$ns" link set "$ns-ns" name eth0
  ip -n "$ns" addr add "$ip/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up

  # 5. its sshd: own host keys, config, pid file and log
  ssh-keygen -q -t ed25519 -N '' -C "$ns" -f "$d/ssh_host_ed25519_key"
  ssh-keygen -q -t ecdsa -N '' -C "$ns" -f "$d/ssh_host_ecdsa_key"
  echo "$ip,$ns $(cut -d' ' -f1,2 "$d/ssh_host_ed25519_key.pub")" >> "$S/known_hosts"
  cp "$S/id_ed25519.pub" "$d/home/.ssh/authorized_keys"
  cat > "$d/sshd_config" <<CFG
ListenAddress $ip:22
HostKey $d/ssh_host_ed25519_key
HostKey $d/ssh_host_ecdsa_key
PidFile $d/sshd.pid
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
StrictModes no
PrintMotd no
PrintLastLog no
X11Forwarding no
AllowTcpForwarding yes
MaxStartups 200:30:400
MaxSessions 200
ClientAliveInterval 5
ClientAliveCountMax 3
AcceptEnv LANG LC_* JIARUN_* JIA_*
Subsystem sftp internal-sftp
CFG
  /usr/sbin/sshd -t -f "$d/sshd_config"
  # own UTS ns (hostname) and, inside ip-netns-exec's private mount ns,
  # a per-host /tmp and /root; sshd daemonizes and writes its pid file.
  ip netns exec "$ns" unshare --uts -- /bin/sh -c "
    hostname $ns
    mount --bind $d/tmp /tmp
    mount --bind $d/home /root
    exec /usr/sbin/sshd -f $d/sshd_config -E $d/sshd.log"
done

# 6. every host gets the same client key, known_hosts and config (~/.ssh)
for i in $(seq 1 "$N"); do
  d=$S/$P$i/home/.ssh
  cp "$S/id_ed25519" "$S/id_ed25519.pub" "$S/known_hosts" "$d/"
  sed "s#$S/id_ed25519#~/.ssh/id_ed25519#; s#$S/known_hosts#~/.ssh/known_hosts#" "$S/ssh_config" > "$d/config"
  chmod 600 "$d/id_ed25519" "$d/config"
done

# 7. wait until every sshd has written its pid file and listens
for i in $(seq 1 "$N"); do
  ns=$P$i ip=$NET.$((10 + i)) ok=
  for _ in $(seq 1 100); do
    if [ -s "$S/$ns/sshd.pid" ] && ip netns exec "$ns" ss -Hltn "sport = :22" | grep -q .; then ok=1; break; fi
    sleep 0.05
  done
  if [ -z "$ok" ]; then
    echo "up.sh: sshd on $ns did not come up; its log:" >&2
    cat "$S/$ns/sshd.log" >&2 || true
    false
  fi
  echo "$ns $ip $(cat "$S/$ns/sshd.pid")" >> "$S/hosts"
done
trap - ERR
cat "$S/hosts"
