#!/bin/sh
# bench_net.sh: modes sync, sharded, static and bagpipe side by side on the same data and model
# over an emulated network (bench/netem.sh: MPI over TCP through a rate-limited loopback in a
# private namespace), at each rate given.  Prints per mode and rate: ms/iter, a trainer's time
# split (waiting for rows, embedding sync, dense all-reduce, compute), both with the first iteration
# left out (it connects and warms every cache), bytes per iteration by
# kind (summed over trainers) and the speedup over sync at that rate, and bytes relative to sync.
#
#   bench/bench_net.sh [BAGPIPE_BIN] [ITERS] [RATES]     (root; RATES default "1gbit 10gbit")
#
# Environment knobs: T (trainers, 2), S (servers, 1), D (row width, 64), B (batch, 1024),
# CACHE (bagpipe rows per trainer, 150000), W (lookahead, 32), P (prefetch, 2), ROWS (samples,
# 300000), TABLES (rows per table).  The defaults are communication-bound: wide rows, 26 skewed
# lookups per sample, a small MLP.  Timings are lower bounds on a shared machine; all ranks share
# its cores (oversubscribed), which every mode pays.
# --help: the comment above, before anything runs.
case "${1:-}" in -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;; esac
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-build/bagpipe}
iters=${2:-200}
rates=${3:-"1gbit 10gbit"}
T=${T:-2} S=${S:-1} D=${D:-64} B=${B:-1024} CACHE=${CACHE:-150000} W=${W:-32} P=${P:-2} ROWS=${ROWS:-300000}
TABLES=${TABLES:-"1000,5000,20000,100000,100000,300,50,200000,1000,5000,20000,100000,100000,300,50,200000,1000,5000,20000,100000,100000,300,50,200000,3000,70000"}
if [ "$(id -u)" != 0 ]; then
    echo "$0: needs root for the network namespace (bench/netem.sh); refusing to run" >&2
    exit 1
fi
dir=$(mktemp -d /tmp/bench-net-XXXXXX)
trap 'rm -rf "$dir"' EXIT
"$bin" synth -p custom --tables "$TABLES" --dense 13 -n "$ROWS" --hot-share 0.9 -o "$dir/d.bin" > /dev/null
model="--arch-mlp-bot 13-$D --arch-mlp-top 16-1 --arch-sparse-feature-size $D --batch-size $B --no-eval --iters $iters --print-every $iters"
echo "bench_net: DLRM 13-$D / 16-1, D=$D, $(echo "$TABLES" | tr , '\n' | wc -l) tables, batch $B, $iters iterations, T=$T S=$S;" \
     "bagpipe cache $CACHE rows, lookahead $W, prefetch $P; binary $bin"
printf '%-8s %-8s %9s %8s %8s %8s %8s %11s %11s %11s %11s %11s %11s %8s %8s\n' rate mode ms/iter wait sync allred comp \
    fetch_B push_B fwd_B wb_B esync_B dense_B speedup bytes/sync
for rate in $rates; do
    sync_ms="" sync_b=""
    for mode in sync sharded static bagpipe; do
        case $mode in
            sync) args="--mode sync --trainers $T --servers $S" ;;
            sharded) args="--mode sharded --trainers $T --servers 0" ;;
            static) args="--mode static --trainers $T --servers $S" ;;
            bagpipe) args="--mode bagpipe --trainers $T --servers $S --cache-rows $CACHE --lookahead $W --prefetch $P" ;;
        esac
        m="$dir/$rate-$mode.jsonl"
        if ! "$here/netem.sh" "$rate" "$bin" train $args $model --metrics "$m" "$dir/d.bin" > "$dir/out" 2>&1; then
            echo "$rate $mode: failed:" >&2
            tail -5 "$dir/out" >&2
            continue
        fi
        line=$(grep '"summary"' "$m" | tail -1)
        num() { echo "$line" | sed -n "s/.*\"$1\":\([-0-9.e+]*\).*/\1/p"; }
        z() { v=$(num "$1"); echo "${v:-0}"; }
        # times per iteration leave the first out (it connects and warms every cache): steady X =
        # (X - first_iter_X) / (iters - 1), as bench/suite.py's steady_ms
        st() { awk -v s="$(z "$1")" -v f="$(z "$2")" -v n="$iters" 'BEGIN{printf "%.6f", (n > 1 ? (s-f)/(n-1) : s/n)}'; }
        ms=$(awk -v s="$(st train_s first_iter_s)" 'BEGIN{printf "%.3f", 1e3*s}')
        tot=$(awk -v a="$(z bytes_row_fetch)" -v b="$(z bytes_grad_push)" -v c="$(z bytes_forward)" -v d="$(z bytes_all_to_all)" \
              -v e="$(z bytes_write_back)" -v f="$(z bytes_emb_sync)" -v g="$(z bytes_allreduce)" -v h="$(z bytes_hot_sync)" \
              -v n="$iters" 'BEGIN{printf "%.0f", (a+b+c+d+e+f+g+h)/n}')
        [ "$mode" = sync ] && sync_ms=$ms sync_b=$tot
        awk -v rate="$rate" -v mode="$mode" -v ms="$ms" -v n="$iters" -v w="$(st wait_rows_s first_iter_wait_rows_s)" \
            -v s="$(st emb_sync_s first_iter_emb_sync_s)" -v a="$(st allreduce_s first_iter_allreduce_s)" \
            -v c="$(st compute_s first_iter_compute_s)" -v f="$(z bytes_row_fetch)" -v p="$(z bytes_grad_push)" \
            -v fw="$(z bytes_forward)" -v x="$(z bytes_all_to_all)" -v wb="$(z bytes_write_back)" -v es="$(z bytes_emb_sync)" \
            -v ss="$(z bytes_hot_sync)" -v d="$(z bytes_allreduce)" -v sms="$sync_ms" -v tot="$tot" -v sb="$sync_b" \
            'BEGIN{sp = sms > 0 && ms > 0 ? sprintf("%7.2fx", sms/ms) : "       -"  # sync failed: no ratios
                   by = sb > 0 ? sprintf("%8.3f", tot/sb) : "       -"
                   printf "%-8s %-8s %9.3f %8.3f %8.3f %8.3f %8.3f %11.0f %11.0f %11.0f %11.0f %11.0f %11.0f %s %s\n",
                   rate, mode, ms, 1e3*w, 1e3*s, 1e3*a, 1e3*c, f/n, p/n, (fw+x)/n, wb/n, (es+ss)/n, d/n,
                   sp, by}'
    done
done
echo "speedup: sync's ms/iter / the mode's at the same rate; bytes/sync: the mode's total bytes per iteration / sync's"
