#!/bin/sh
# bench_async.sh: mode async (HET-style per-trainer caches read up to S iterations stale) next to
# sync and bagpipe, on the same planted synthetic data, model and seed:
#   1. time and bytes per iteration of sync, bagpipe and async with S = 1, 8, 100, over an
#      emulated network (bench/netem.sh: MPI over TCP through a rate-limited loopback in a
#      private namespace) when root and network namespaces are available, else unemulated
#      (shared memory) and labelled so;
#   2. convergence: validation logloss and AUC (and the training loss) against samples for the
#      same runs, unemulated, every run evaluated during training (--eval-every works in every
#      mode); bagpipe's model is sync's bit for bit at every iteration, so its curves are sync's.
#
#   bench/bench_async.sh OUTDIR [--quick]
#
# Writes OUTDIR/async.md (tables, the command, the date), OUTDIR/async_convergence.png (gnuplot,
# tools/plot_async.gp) and OUTDIR/async_*.jsonl (every run's metrics).  --quick: a small data set
# and short runs (about a minute on an idle 2-core machine).  Environment: BAGPIPE_BIN
# (build/bagpipe), T (trainers, 2), S (servers, 1), CACHE (rows per trainer for async and
# bagpipe, 100000), RATES (emulated rates, default "1gbit" with --quick, "1gbit 10gbit" without;
# "none": no emulation, as bench/suite.sh asks when it emulates none).
# Timings are lower bounds on a shared machine (every rank shares its cores, oversubscribed);
# the ratios measured side by side in one run are the figures to quote.
# --help: the comment above, before anything runs.
case "${1:-}" in -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;; esac
set -eu
if [ "$#" -lt 1 ] || [ "$#" -gt 2 ] || { [ "$#" = 2 ] && [ "$2" != --quick ]; }; then
    echo "usage: $0 OUTDIR [--quick]" >&2
    exit 2
fi
outdir=$1
quick=0
[ "${2:-}" = --quick ] && quick=1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
bin=${BAGPIPE_BIN:-$root/build/bagpipe}
if [ ! -x "$bin" ]; then
    echo "$0: no bagpipe binary at $bin (run make, or set BAGPIPE_BIN)" >&2
    exit 1
fi
command -v gnuplot > /dev/null || { echo "$0: needs gnuplot (apt-get install gnuplot-nox)" >&2; exit 1; }
mkdir -p "$outdir"
T=${T:-2} S=${S:-1} CACHE=${CACHE:-100000}
if [ "$quick" = 1 ]; then
    ROWS=64000 ITERS=30 EVERY=20 EVAL_ROWS=5000 RATES=${RATES:-1gbit}
else
    ROWS=800000 ITERS=300 EVERY=125 EVAL_ROWS=20000 RATES=${RATES:-"1gbit 10gbit"}
fi
B=512
TABLES="1000,5000,20000,100000,100000,300,50,200000,1000,5000,20000,100000,100000,300,50,200000,1000,5000,20000,100000,100000,300,50,200000,3000,70000"
tmp=$(mktemp -d /tmp/bench-async-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
started=$(date -u '+%Y-%m-%d %H:%M UTC')
load0=$(cut -d' ' -f1-3 /proc/loadavg)

"$bin" synth -p custom --tables "$TABLES" --dense 13 -n "$ROWS" --seed 7 -o "$tmp/d.bin" > "$tmp/synth.txt"
conv_iters=$(( ROWS * 8 / 10 / B )) # one epoch of the train split
model="--arch-mlp-bot 13-64-16 --arch-mlp-top 64-1 --arch-sparse-feature-size 16 --batch-size $B \
--emb-optimizer adagrad --learning-rate 0.1 --seed 1"
runs="sync async-S1 async-S8 async-S100 bagpipe" # bagpipe last: drawn over sync, which it equals
mode_args() {
    case $1 in
        sync) echo "--mode sync --trainers $T --servers $S" ;;
        bagpipe) echo "--mode bagpipe --trainers $T --servers $S --cache-rows $CACHE --lookahead 32 --prefetch 2" ;;
        async-S*) echo "--mode async --trainers $T --servers $S --cache-rows $CACHE --cache-policy lru --staleness ${1#async-S}" ;;
    esac
}
# The number after "key": in the last summary line of a metrics file (empty when absent).
num() { grep '"summary"' "$1" | tail -1 | sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p"; }
z() { v=$(num "$1" "$2"); echo "${v:-0}"; }
# A time of the summary with its first iteration left out (it connects and warms every cache),
# scaled back to ITERS iterations so that the report divides every column by ITERS alike:
# (X - first_iter_X) x ITERS / (ITERS - 1).
steady() { awk -v s="$(z "$1" "$2")" -v f="$(z "$1" "$3")" -v n="$ITERS" 'BEGIN{printf "%.6f", (n > 1 ? (s-f)*n/(n-1) : s)}'; }

# Is an emulated network possible here?  (root, and a network namespace can be made; RATES=none: not asked for)
net=none unemulated="no root or no network namespaces"
if [ "$RATES" = none ]; then
    unemulated="RATES=none"
elif [ "$(id -u)" = 0 ] && ip netns add "bpchk$$" 2> /dev/null; then
    ip netns del "bpchk$$"
    net=emulated
fi
[ "$net" = none ] && RATES=none

# 1. Time and bytes per iteration.
: > "$tmp/time.rows"
for rate in $RATES; do
    for r in $runs; do
        m="$outdir/async_time_${rate}_$r.jsonl"
        rm -f "$m"
        set -- "$bin" train $(mode_args "$r") $model --no-eval --iters "$ITERS" --print-every "$ITERS" --metrics "$m" "$tmp/d.bin"
        [ "$rate" != none ] && set -- "$here/netem.sh" "$rate" "$@"
        if ! "$@" > "$tmp/out" 2>&1; then
            echo "$0: $rate $r failed:" >&2
            tail -5 "$tmp/out" >&2
            exit 1
        fi
        bytes=$(awk -v a="$(z "$m" bytes_row_fetch)" -v b="$(z "$m" bytes_grad_push)" -v c="$(z "$m" bytes_forward)" \
                    -v d="$(z "$m" bytes_all_to_all)" -v e="$(z "$m" bytes_write_back)" -v f="$(z "$m" bytes_emb_sync)" \
                    -v g="$(z "$m" bytes_allreduce)" -v h="$(z "$m" bytes_hot_sync)" 'BEGIN{printf "%.0f", a+b+c+d+e+f+g+h}')
        echo "$rate $r $(steady "$m" train_s first_iter_s) $(steady "$m" wait_rows_s first_iter_wait_rows_s) \
$(steady "$m" emb_sync_s first_iter_emb_sync_s) $(steady "$m" allreduce_s first_iter_allreduce_s) \
$(steady "$m" compute_s first_iter_compute_s) $(z "$m" bytes_row_fetch) $(z "$m" bytes_grad_push) $(z "$m" bytes_allreduce) $bytes \
$(z "$m" hit_rate) $(num "$m" staleness_max) $(num "$m" staleness_mean)" >> "$tmp/time.rows"
    done
done

# 2. Convergence (unemulated: only samples count here).
for r in $runs; do
    m="$outdir/async_conv_$r.jsonl"
    rm -f "$m"
    if ! "$bin" train $(mode_args "$r") $model --iters "$conv_iters" --print-every "$(( EVERY / 2 ))" --eval-every "$EVERY" \
         --eval-rows "$EVAL_ROWS" --metrics "$m" "$tmp/d.bin" > "$tmp/out" 2>&1; then
        echo "$0: convergence run $r failed:" >&2
        tail -5 "$tmp/out" >&2
        exit 1
    fi
    grep '"event":"train"' "$m" | sed -n 's/.*"samples":\([0-9]*\).*"loss":\([-0-9.e+]*\).*/\1 \2/p' > "$tmp/$r.train"
    { grep '"event":"eval"' "$m" | sed -n 's/.*"samples":\([0-9]*\).*"auc":\([-0-9.e+]*\),"logloss":\([-0-9.e+]*\).*/\1 \3 \2/p'
      grep '"summary"' "$m" | sed -n 's/.*"samples":\([0-9]*\).*"auc":\([-0-9.e+]*\),"logloss":\([-0-9.e+]*\).*/\1 \3 \2/p'
    } > "$tmp/$r.eval"
done
gnuplot -e "dir='$tmp'; out='$outdir/async_convergence.png'; runs='$runs'" "$root/tools/plot_async.gp"
load1=$(cut -d' ' -f1-3 /proc/loadavg)

# 3. The report.
{
    echo "# async (bounded staleness) vs sync vs bagpipe"
    echo
    echo "Command: \`bench/bench_async.sh OUTDIR$([ "$quick" = 1 ] && echo " --quick")\`, started $started" \
         "(load average $load0 at the start, $load1 at the end; timings are lower bounds on a shared machine)."
    echo "Binary: \`$(basename "$bin")\`; $(grep -m1 shape "$tmp/synth.txt" | sed 's/^ *shape *//; s/; seed.*//'), $ROWS samples (seed 7, planted click model); $(grep -m1 labels "$tmp/synth.txt" | sed 's/^ *labels *//')."
    echo "Model: DLRM 13-64-16 / 64-1, D = 16, batch $B, Adagrad rows, SGD dense, lr 0.1; T = $T trainers, S = $S server(s);" \
         "async and bagpipe caches $CACHE rows per trainer (async: LRU); bagpipe lookahead 32, prefetch 2."
    echo
    if [ "$net" = emulated ]; then
        echo "## Time and bytes per iteration ($ITERS iterations, times without the first; emulated network: MPI over TCP through a rate-limited loopback, bench/netem.sh, no added latency)"
    else
        echo "## Time and bytes per iteration ($ITERS iterations, times without the first; **unemulated**: shared memory on one machine, $unemulated)"
    fi
    echo
    echo "| network | mode | ms/iter | vs sync | wait rows ms | emb sync ms | all-reduce ms | compute ms | fetch B/it | push B/it | all-reduce B/it | total B/it | bytes vs sync | hit rate | staleness max / mean |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    awk -v n="$ITERS" '
        $2 == "sync" { st[$1] = $3; sb[$1] = $11 }
        { rows[NR] = $0 }
        END {
            for (i = 1; i <= NR; i++) {
                split(rows[i], f, " ")
                stale = f[13] == "" ? "-" : sprintf("%d / %.2f", f[13], f[14])
                hit = f[2] ~ /^async/ ? sprintf("%.1f%%", 100 * f[12]) : "-"
                printf "| %s | %s | %.2f | %.2fx | %.2f | %.2f | %.2f | %.2f | %.0f | %.0f | %.0f | %.0f | %.2fx | %s | %s |\n",
                    f[1] == "none" ? "shared memory" : f[1], f[2], 1e3 * f[3] / n, f[3] / st[f[1]], 1e3 * f[4] / n,
                    1e3 * f[5] / n, 1e3 * f[6] / n, 1e3 * f[7] / n, f[8] / n, f[9] / n, f[10] / n, f[11] / n,
                    f[11] / sb[f[1]], hit, stale
            }
        }' "$tmp/time.rows"
    echo
    echo "vs sync: the mode's time (bytes) per iteration over sync's at the same network, measured in the same run;"
    echo "bytes are summed over the trainers (row fetch = requests + replies; bagpipe's forwards, write-backs and"
    echo "gradient exchange are in the total). The hit rate counts lookups served from the cache without a fetch."
    echo
    echo "## Convergence (one epoch, $conv_iters iterations, $(( conv_iters * B )) samples; validation on $EVAL_ROWS rows every $EVERY iterations)"
    echo
    echo "![convergence](async_convergence.png)"
    echo
    printf '| samples |'
    for r in $runs; do printf ' %s logloss | %s AUC |' "$r" "$r"; done
    echo
    printf '|---|'
    for r in $runs; do printf -- '---|---|'; done
    echo
    cut -d' ' -f1 "$tmp"/*.eval | sort -n -u | while read -r s; do
        printf '| %s |' "$s"
        for r in $runs; do
            awk -v s="$s" '$1 == s { printf " %.4f | %.4f |", $2, $3; found = 1 } END { if (!found) printf " - | - |" }' "$tmp/$r.eval"
        done
        echo
    done
    echo
    sl=$(tail -1 "$tmp/sync.eval") bl=$(tail -1 "$tmp/bagpipe.eval")
    if cmp -s "$tmp/sync.eval" "$tmp/bagpipe.eval"; then
        echo "bagpipe's evaluations equal sync's exactly at all $(wc -l < "$tmp/sync.eval") points (the last: $sl): the same model, bit for bit, at its own speed."
    else
        echo "**bagpipe's evaluations differ from sync's (the last: $bl vs $sl).**"
    fi
    echo "Bayes-optimal (planted model) on the evaluated rows: $(grep '"summary"' "$outdir/async_conv_sync.jsonl" | sed -n 's/.*"bayes_auc":\([-0-9.e+]*\),"bayes_logloss":\([-0-9.e+]*\).*/AUC \1, logloss \2/p')."
    echo
    echo "Metrics of every run: async_time_NETWORK_MODE.jsonl and async_conv_MODE.jsonl (summary lines carry"
    echo "staleness_hist: lookups by age in iterations, and the cache's misses, refreshes, evictions and peak rows)."
} > "$outdir/async.md"
echo "bench_async: wrote $outdir/async.md, $outdir/async_convergence.png and $(ls "$outdir"/async_*.jsonl | wc -l) metrics files"
