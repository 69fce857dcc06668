#!/bin/sh
# netem_hosts.sh: run an MPI job with its ranks on emulated hosts, one network namespace per host,
# each behind its own rate-limited full-duplex link into one switch: the realistic emulation of a
# cluster network on one machine.  Where bench/netem.sh puts every rank on one shared
# loopback, here each host's link carries only that host's traffic, RATE in each direction: a
# server's link carries what every trainer fetches from it, and two trainers exchanging rows use
# their own two links.
#
#   bench/netem_hosts.sh RATE SLOTS COMMAND [ARGS...]
#       RATE   a tc rate, e.g. 1gbit, 10gbit
#       SLOTS  ranks per host, comma-separated, e.g. 2,1,1: host 0 runs ranks 0-1, host 1 rank 2,
#              host 2 rank 3 (bagpipe's layout: rank 0 the oracle, then the servers, then the
#              trainers; so 2,1,1 is oracle + server on one host and each trainer on its own)
#
# COMMAND runs in a launcher namespace (its own unshaped link into the switch) with MPIRUN set to
# an mpirun command line that places the ranks on the hosts, e.g.
#   bench/netem_hosts.sh 1gbit 2,1,1 sh -c '$MPIRUN -np 4 build/bagpipe train --mode sync ...'
# Ranks on one host talk through shared memory, across hosts through TCP on the shaped links.
# mpirun reaches a host through an agent script (plm_rsh_agent) that enters the host's namespace
# and gives it its own host name (unshare --uts).  Needs root.  Only the new namespaces are
# configured (a private subnet that only they carry); all are deleted on every exit path.
# The kernel here has no netem qdisc: no latency is added, only bandwidth is emulated.
# HOST_CPUS (optional) gives each host its own CPUs as well, colon-separated in host order, each a
# taskset list, e.g. 0:1 (host 0 on CPU 0, host 1 on CPU 1): every rank of a host runs there, as
# on a machine of its own.  Hosts left out run anywhere.
# --help: the comment above, before anything runs.
case "${1:-}" in -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;; esac
set -eu
. "$(dirname "$0")/netem_lib.sh"

netem_need_args "$#" 3 "RATE SLOTS COMMAND [ARGS...]   (RATE e.g. 1gbit; SLOTS e.g. 2,1,1)"
netem_need_root
netem_need_tools ip tc unshare mpirun
rate=$1 slots=$2
shift 2
netem_check_rate "$rate"
case "$slots" in
    *[!0-9,]* | "" | ,* | *, | *,,*) echo "$0: bad SLOTS '$slots' (e.g. 2,1,1)" >&2; exit 2 ;;
esac
host_cpus=${HOST_CPUS:-}
case "$host_cpus" in
    *[!0-9,:-]*) echo "$0: bad HOST_CPUS '$host_cpus' (e.g. 0:1)" >&2; exit 2 ;;
esac
if [ -n "$host_cpus" ]; then netem_need_tools taskset; fi

tag=bp$$
sw=${tag}sw
tmp=$(mktemp -d /tmp/netem-hosts-XXXXXX)
nhosts=0
child=""
cleanup() {
    if [ -n "$child" ] && kill -0 "$child" 2>/dev/null; then
        kill -TERM "$child" 2>/dev/null || true
        wait "$child" 2>/dev/null || true
    fi
    # Deleting a namespace deletes its end of each veth pair, and with it the other end.
    for ns in $(ip netns list | awk '{print $1}' | grep "^$tag" || true); do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

subnet=10.213.77
ip netns add "$sw"
ip -n "$sw" link set lo up
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up

# attach NAME ADDR RATE: a namespace NAME with link eth0 at ADDR into the switch; RATE "" leaves
# the link unshaped (the launcher's), otherwise tbf on both ends shapes each direction.
attach() {
    ip netns add "$1"
    ip -n "$1" link set lo up
    ip link add "${tag}a" type veth peer name "${tag}b"
    ip link set "${tag}a" netns "$1"
    ip link set "${tag}b" netns "$sw"
    ip -n "$1" link set "${tag}a" name eth0
    ip -n "$sw" link set "${tag}b" name "p$2"
    ip -n "$1" link set eth0 mtu 65535
    ip -n "$sw" link set "p$2" mtu 65535 master br0
    ip -n "$1" addr add "$subnet.$2/24" dev eth0
    ip -n "$1" link set eth0 up
    ip -n "$sw" link set "p$2" up
    if [ -n "$3" ]; then
        # upload: the host's own egress; download: the switch port's egress towards the host
        ip netns exec "$1" tc qdisc add dev eth0 root tbf rate "$3" burst 256kb latency 20ms
        ip netns exec "$sw" tc qdisc add dev "p$2" root tbf rate "$3" burst 256kb latency 20ms
    fi
}
attach "${tag}l" 2 ""
hostfile=$tmp/hosts
: > "$hostfile"
for n in $(echo "$slots" | tr , ' '); do
    attach "${tag}h$nhosts" $((10 + nhosts)) "$rate"
    echo "$subnet.$((10 + nhosts)) slots=$n" >> "$hostfile"
    nhosts=$((nhosts + 1))
done

# The agent: mpirun runs "AGENT [options] HOST COMMAND..." as it would run ssh; HOST is an address
# from the hostfile, COMMAND a shell command line for the remote side.
agent=$tmp/agent
cat > "$agent" << EOF
#!/bin/sh
while [ "\$#" -gt 0 ]; do
    case "\$1" in -*) shift ;; *) break ;; esac
done
host=\$1
shift
i=\$(( \${host##*.} - 10 ))
cpus=\$(sed -n "\$((i + 1))p" "$tmp/cpus")
exec ip netns exec "${tag}h\$i" \${cpus:+taskset -c \$cpus} unshare --uts sh -c "hostname host\$i; \$*"
EOF
echo "$host_cpus" | tr : '\n' > "$tmp/cpus"
chmod +x "$agent"

# The job's settings: the ones src/launch.c uses for a local job, plus the placement.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN="mpirun --hostfile $hostfile --mca plm_rsh_agent $agent --mca plm_rsh_no_tree_spawn 1 \
--bind-to none --oversubscribe --mca btl self,vader,tcp --mca btl_tcp_if_include $subnet.0/24 \
--mca oob_tcp_if_include $subnet.0/24 --mca mpi_yield_when_idle 1 --mca btl_vader_single_copy_mechanism none"
export MPIRUN
ip netns exec "${tag}l" unshare --uts sh -c 'hostname launcher; exec "$@"' sh "$@" &
child=$!
status=0
wait "$child" || status=$?
child=""
exit "$status"
