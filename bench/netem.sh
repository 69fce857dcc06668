#!/bin/sh
# netem.sh: run one command inside a private network namespace whose loopback is rate-limited,
# with Open MPI told to use TCP over that loopback: the simplest cluster network on one machine.
#
#   bench/netem.sh RATE COMMAND [ARGS...]      RATE: a tc rate, e.g. 1gbit, 10gbit
#
# Every rank of an mpirun started by COMMAND then talks over TCP through the shaped loopback
# (one tbf qdisc on lo carries both directions), so each message pays the emulated bandwidth.
# Needs root.  Only the new namespace is configured: the root namespace's interfaces are never
# touched.  The namespace is deleted on every exit path (trap), also on Ctrl-C, TERM and HUP,
# after the command is stopped.  Exits with the command's status.
# The kernel here has no netem qdisc, so no latency is added; only bandwidth is emulated.
# --help: the comment above, before anything runs.
case "${1:-}" in -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;; esac
set -eu
. "$(dirname "$0")/netem_lib.sh"

netem_need_args "$#" 2 "RATE COMMAND [ARGS...]   (RATE e.g. 1gbit, 10gbit)"
netem_need_root
netem_need_tools ip tc
rate=$1
shift
netem_check_rate "$rate"

ns="bpnetem$$"
if ip netns list | grep -qw "$ns"; then
    echo "$0: namespace $ns already exists; refusing to reuse it" >&2
    exit 1
fi
child=""
cleanup() {
    # A command still running (the script was signalled) is stopped first, so that nothing is left
    # inside the namespace; then the namespace goes, and with it its loopback and qdisc.
    if [ -n "$child" ] && kill -0 "$child" 2>/dev/null; then
        kill -TERM "$child" 2>/dev/null || true
        wait "$child" 2>/dev/null || true
    fi
    ip netns del "$ns" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

ip netns add "$ns"
ip -n "$ns" link set lo up
ip netns exec "$ns" tc qdisc add dev lo root tbf rate "$rate" burst 256kb latency 20ms

# Open MPI: TCP only (no shared memory), on the namespace's loopback; the launcher (src/launch.c)
# adds the oversubscription and root settings.  The command runs in the background so that a
# signal reaches the traps at once rather than when the command ends.
ip netns exec "$ns" env OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo \
    OMPI_MCA_btl_tcp_links=1 "$@" &
child=$!
status=0
wait "$child" || status=$?
child=""
exit "$status"
