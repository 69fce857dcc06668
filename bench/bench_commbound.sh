#!/bin/sh
# bench_commbound.sh: sync, bagpipe and a compute-only bound side by side in a communication-bound
# configuration behind an emulated network (bench/netem.sh: MPI over TCP through one rate-limited
# loopback in a private namespace), repeated and alternated, with the lower bound on the bytes any
# bit-identical protocol must move on the same batches (build/bench/bench_commbound).
#
#   bench/bench_commbound.sh [OUT.md]          (root; prints the report, and writes it to OUT.md)
#
# Per round (ROUNDS rounds, the runs alternated within each round):
#   sync      --mode sync --trainers T --servers S
#   bagpipe   --mode bagpipe, same flags, --cache-rows CACHE --lookahead W --prefetch P
#   local/T   the compute-only bound: T processes of --mode local started together, each with the
#             per-trainer batch B/T, the same model and data (every row local, no message at all,
#             the T processes share the cores as the T trainers do).  Its time is the slowest
#             process's; "+dense" adds the dense all-reduce's bytes at the emulated rate, the
#             bound for trainers that keep every row local but still all-reduce the dense model.
# Reported: ms/iter (trainer 0's time per iteration after the first WARM (10), the warm-up; median
# over rounds, and per round), the trainer's breakdown over the same iterations (compute, row
# wait, emb sync, dense all-reduce), bytes per iteration over the whole run summed over the
# trainers by kind (fetch = row requests + replies + bagpipe's forwards, write-back, sync = sync's
# gradient pushes or bagpipe's GSYNC, dense all-reduce), ratios vs sync measured in the same
# round, the whole job's CPU time (user + sys of every rank) against wall time x cores, and the
# machine's busy share over the run from /proc/stat (what else ran: other users' load).
#
# MODES (default "sync bagpipe local") may add bagpipe-fg: mode bagpipe with every sync-later
# reduction on the critical path (BAGPIPE_SYNC_LATER_NOW=1), the protocol before the background one.
# NET (shared): "shared" puts every rank behind one rate-limited loopback (bench/netem.sh: one link
# for all ranks and both directions); "hosts" gives the oracle and the servers one emulated host
# and each trainer its own, each host behind its own full-duplex link of RATE
# (bench/netem_hosts.sh), as separate machines on a switch would be.
# PIN=1 (with NET=hosts, on a machine with at least T + 1 CPUs) gives each emulated host CPUs of its
# own as well, as separate machines have: host 0 (the oracle and the servers) CPU 0, the trainers'
# hosts the others (trainer j on CPU 1 + j mod (CPUs - 1)), and local process j the CPU of trainer j.
# Environment: BAGPIPE_BIN (build/bagpipe), LB_BIN (build/bench/bench_commbound), RATE (200mbit),
# T (2), S (1), D (64), B (1024), ITERS (60), ROUNDS (2), CACHE (150000), W (32), P (2),
# ROWS (200000), EMB_OPT (sgd), BAGPIPE_EXTRA (more bagpipe flags), DATA (an existing dataset;
# default: the criteo-small shape, `bagpipe synth`, Zipf calibrated to 90% of lookups on the
# top 1% of rows).  Timings are lower bounds on a shared machine; quote the ratios.
# --help: the comment above, before anything runs.
case "${1:-}" in -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;; esac
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
bin=${BAGPIPE_BIN:-$root/build/bagpipe}
lb=${LB_BIN:-$root/build/bench/bench_commbound}
out=${1:-}
RATE=${RATE:-200mbit} T=${T:-2} S=${S:-1} D=${D:-64} B=${B:-1024} ITERS=${ITERS:-60} ROUNDS=${ROUNDS:-2}
CACHE=${CACHE:-150000} W=${W:-32} P=${P:-2} ROWS=${ROWS:-200000} EMB_OPT=${EMB_OPT:-sgd}
BAGPIPE_EXTRA=${BAGPIPE_EXTRA:-} NET=${NET:-shared} WARM=${WARM:-10} PIN=${PIN:-0}
[ "$ITERS" -gt "$WARM" ] || { echo "$0: ITERS ($ITERS) must exceed WARM ($WARM)" >&2; exit 2; }
case "$NET" in shared | hosts) ;; *) echo "$0: NET must be shared or hosts, not '$NET'" >&2; exit 2 ;; esac
ncpu=$(nproc)
case "$PIN" in
    0) ;;
    1) if [ "$NET" != hosts ] || [ "$ncpu" -lt $((T + 1)) ]; then
           echo "$0: PIN=1 needs NET=hosts and at least T + 1 = $((T + 1)) CPUs (this machine: $ncpu)" >&2
           exit 2
       fi ;;
    *) echo "$0: PIN must be 0 or 1, not '$PIN'" >&2; exit 2 ;;
esac
trainer_cpu() { echo $((1 + $1 % (ncpu - 1))); } # PIN=1: the CPU of trainer $1's host
host_cpus=""
if [ "$PIN" = 1 ]; then
    host_cpus=0
    for j in $(seq 0 $((T - 1))); do host_cpus="$host_cpus:$(trainer_cpu "$j")"; done
fi
MODES=${MODES:-"sync bagpipe local"} # also bagpipe-fg: bagpipe with BAGPIPE_SYNC_LATER_NOW=1 (no background reduction)
if [ "$(id -u)" != 0 ]; then
    echo "$0: needs root for the network namespace (bench/netem.sh); refusing to run" >&2
    exit 1
fi
for f in "$bin" "$lb"; do
    [ -x "$f" ] || { echo "$0: $f missing (run make)" >&2; exit 1; }
done
tmp=$(mktemp -d /tmp/bench-commbound-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# criteo-kaggle's tables with every table above 1000 rows cut 100x (kept at >= 1000): criteo-small
TABLES="1000,583,101312,22026,305,24,1000,633,3,1000,1000,83515,1000,27,1000,54613,10,1000,1000,4,70465,18,15,2861,105,1425"
data=${DATA:-}
if [ -z "$data" ]; then
    data=$tmp/d.bin
    "$bin" synth -p custom --tables "$TABLES" --dense 13 --split kaggle -n "$ROWS" --seed 1 -o "$data" > "$tmp/synth.txt"
fi
cores=$(nproc)
model="--arch-mlp-bot 13-$D --arch-mlp-top 64-1 --arch-sparse-feature-size $D --emb-optimizer $EMB_OPT --seed 1 \
--no-eval --iters $ITERS --print-every $WARM"
# The number after "key": in the summary line of a metrics file (0 when absent).
z() { v=$(grep '"summary"' "$1" | tail -1 | sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p"); echo "${v:-0}"; }
# "train compute wait sync allreduce" seconds of a metrics file over the windows after the first
# WARM iterations (each train line is one window of --print-every WARM iterations; its time is its
# samples over its rate, its splits are the window's own).
steady() {
    awk -v warm="$WARM" 'function get(k,   r) { if (!match($0, "\"" k "\":[-0-9.e+]*")) return 0
            r = substr($0, RSTART, RLENGTH); sub(/.*:/, "", r); return r + 0 }
        /"event":"train"/ { it = get("iter"); smp = get("samples")
            if (it > warm) { t += (smp - prev) / get("samples_per_s"); c += get("compute_s"); w += get("wait_rows_s")
                             y += get("emb_sync_s"); a += get("allreduce_s") }
            prev = smp }
        END { printf "%.6f %.6f %.6f %.6f %.6f\n", t, c, w, y, a }' "$1"
}
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }

# run NAME ROUND: one run; appends "name round ms compute wait sync ar fetch wb esync dense cpu_share busy" to rows
: > "$tmp/rows"
run() {
    name=$1 r=$2 m=$tmp/$name-$r.jsonl
    rm -f "$m"
    b0=$(busy)
    w0=$(date +%s.%N)
    case $name in
        sync | bagpipe | bagpipe-fg)
            args="--mode ${name%-fg} --trainers $T --servers $S --batch-size $B"
            [ "$name" != sync ] && args="$args --cache-rows $CACHE --lookahead $W --prefetch $P $BAGPIPE_EXTRA"
            fg=0
            [ "$name" = bagpipe-fg ] && fg=1
            if [ "$NET" = hosts ]; then
                # one host for the oracle and the servers, one per trainer (bench/netem_hosts.sh)
                set -- env HOST_CPUS="$host_cpus" "$here/netem_hosts.sh" "$RATE" "$((1 + S))$(printf ',1%.0s' $(seq 1 "$T"))" \
                    sh -c 'exec $MPIRUN -x BAGPIPE_SYNC_LATER_NOW -np "$0" "$@"' "$((1 + S + T))"
            else
                set -- "$here/netem.sh" "$RATE"
            fi
            if ! BAGPIPE_SYNC_LATER_NOW=$fg /usr/bin/time -f "%U %S" -o "$tmp/cpu" "$@" "$bin" train $args $model \
                 --metrics "$m" "$data" > "$tmp/out" 2>&1; then
                echo "$0: $name failed:" >&2
                tail -5 "$tmp/out" >&2
                exit 1
            fi
            cpu=$(awk '{print $1 + $2}' "$tmp/cpu")
            # mpirun's daemons on the emulated hosts detach from it, so time(1) does not see the
            # ranks' CPU there: not reported
            [ "$NET" = hosts ] && cpu=-1
            ;;
        local)
            pids=""
            for i in $(seq 0 $((T - 1))); do
                pin=""
                [ "$PIN" = 1 ] && pin="taskset -c $(trainer_cpu "$i")"
                $pin /usr/bin/time -f "%U %S" -o "$tmp/cpu.$i" "$bin" train --mode local --batch-size $((B / T)) $model \
                    --metrics "$m.$i" "$data" > "$tmp/out.$i" 2>&1 &
                pids="$pids $!"
            done
            for p in $pids; do wait "$p" || { echo "$0: local run failed" >&2; cat "$tmp"/out.* >&2; exit 1; }; done
            slow=$m.0
            for i in $(seq 1 $((T - 1))); do
                [ "$(awk -v a="$(steady "$m.$i" | cut -d' ' -f1)" -v b="$(steady "$slow" | cut -d' ' -f1)" 'BEGIN{print (a > b)}')" = 1 ] && slow=$m.$i
            done
            cp "$slow" "$m"
            cpu=$(cat "$tmp"/cpu.* | awk '{s += $1 + $2} END {print s}')
            ;;
    esac
    w1=$(date +%s.%N)
    b1=$(busy)
    echo "$name $r $(steady "$m")" \
         "$(awk -v a="$(z "$m" bytes_row_fetch)" -v b="$(z "$m" bytes_forward)" 'BEGIN{printf "%.0f", a + b}')" \
         "$(z "$m" bytes_write_back)" \
         "$(awk -v a="$(z "$m" bytes_grad_push)" -v b="$(z "$m" bytes_emb_sync)" 'BEGIN{printf "%.0f", a + b}')" \
         "$(z "$m" bytes_allreduce)" \
         "$(awk -v c="$cpu" -v w0="$w0" -v w1="$w1" -v n="$cores" 'BEGIN{printf "%.3f", c / ((w1 - w0) * n)}')" \
         "$(echo "$b0 $b1" | awk '{printf "%.3f", ($3 - $1) / ($4 - $2)}')" >> "$tmp/rows"
}

started=$(date -u '+%Y-%m-%d %H:%M UTC')
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq 1 "$ROUNDS"); do
    # alternate the order from round to round so that drifting load hits every mode alike
    if [ $((r % 2)) = 1 ]; then order=$MODES; else order=$(echo "$MODES" | awk '{for (i = NF; i > 0; i--) printf "%s ", $i}'); fi
    for name in $order; do run "$name" "$r"; done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)
"$lb" "$data" "$B" "$T" "$ITERS" "$D" "$W" > "$tmp/lb.txt"
# rate in bytes/s for the "+dense" bound
rate_Bps=$(echo "$RATE" | awk '{ v = $1 + 0; u = tolower($1); sub(/^[0-9.]+/, "", u);
    m = u == "kbit" ? 1e3 : u == "mbit" ? 1e6 : u == "gbit" ? 1e9 : u == "bit" ? 1 : 0; print v * m / 8 }')

{
    echo "## sync vs bagpipe vs compute-only bound at $RATE ($( [ "$NET" = hosts ] && echo "one link per host" || echo "one shared link"))"
    echo
    echo "Command: \`NET=$NET PIN=$PIN WARM=$WARM MODES='$MODES' RATE=$RATE T=$T S=$S D=$D B=$B ITERS=$ITERS ROUNDS=$ROUNDS CACHE=$CACHE W=$W P=$P EMB_OPT=$EMB_OPT" \
         "BAGPIPE_EXTRA='$BAGPIPE_EXTRA' bench/bench_commbound.sh\`, started $started (load average $load0 at the start," \
         "$load1 at the end; $cores cores).  DLRM 13-$D / 64-1, D = $D, batch $B ($((B / T)) per trainer)," \
         "$EMB_OPT rows; data: $( [ -n "${DATA:-}" ] && echo "$DATA" || echo "criteo-small shape, $ROWS samples, seed 1")."
    echo
    echo "Times are per iteration over iterations $((WARM + 1))-$ITERS of each run (the first $WARM, the warm-up, left out: first touches of tables and caches, cold fetches, ranks still starting); bytes over all $ITERS, the batches of the bound below.  ms/iter and time vs sync: the median over the rounds (the machine is shared: a round that another user's load hits is visible in the per-round column); the other cells: the mean over the rounds; the time split is trainer 0's; bytes are summed over the trainers.  local: compute only (its split is not measured; it sends nothing)."
    echo
    echo "| mode | ms/iter (median) | per round | compute ms | row wait ms | emb sync ms | all-reduce ms | fetch B/it | write-back B/it | sync B/it | dense B/it | total B/it | time vs sync | bytes vs sync | job CPU / (wall x cores) | machine busy |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    awk -v n="$ITERS" -v ns="$((ITERS - WARM))" -v rate="$rate_Bps" '
        function median(k,   i, j, m, v, x) {
            m = c[k]; for (i = 1; i <= m; i++) v[i] = all[k, i]
            for (i = 2; i <= m; i++) { x = v[i]; for (j = i - 1; j > 0 && v[j] > x; j--) v[j + 1] = v[j]; v[j + 1] = x }
            return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
        }
        { k = $1; c[k]++; all[k, c[k]] = 1e3 * $3 / ns; ms[k] += 1e3 * $3 / ns; per[k] = per[k] (per[k] == "" ? "" : ", ") sprintf("%.1f", 1e3 * $3 / ns)
          for (i = 4; i <= 13; i++) s[k, i] += $i; if (!(k in seen)) { seen[k] = 1; order[++no] = k } }
        END {
            for (j = 1; j <= no; j++) {
                k = order[j]; m = c[k]
                fb = s[k, 8] / m / n; wb = s[k, 9] / m / n; sb = s[k, 10] / m / n; db = s[k, 11] / m / n
                tot = fb + wb + sb + db; if (k == "sync") { st = median(k); sbt = tot }
                rms[k] = median(k); rtot[k] = tot
                line[k] = sprintf("| %s | %.1f | %s | %.1f | %.1f | %.1f | %.1f | %.0f | %.0f | %.0f | %.0f | %.0f |", k, median(k), per[k],
                    1e3 * s[k, 4] / m / ns, 1e3 * s[k, 5] / m / ns, 1e3 * s[k, 6] / m / ns, 1e3 * s[k, 7] / m / ns, fb, wb, sb, db, tot)
                tail[k] = s[k, 12] < 0 ? sprintf(" - | %.1f%% |", 100 * s[k, 13] / m) : sprintf(" %.1f%% | %.1f%% |", 100 * s[k, 12] / m, 100 * s[k, 13] / m)
            }
            for (j = 1; j <= no; j++) {
                k = order[j]
                # without a sync run (MODES) there is nothing to divide by: "-"
                tb = k == "local" || !("sync" in c) ? "-" : sprintf("%.3fx", rtot[k] / sbt)
                tt = "sync" in c ? sprintf("%.3fx", rms[k] / st) : "-"
                if (k == "local") sub(/\| 0.0 \| 0.0 \| 0.0 \| 0.0 \|/, "| - | - | - | - |", line[k])
                printf "%s %s | %s |%s\n", line[k], tt, tb, tail[k]
            }
            if (("sync" in c) && ("local" in c)) {
                db = s["sync", 11] / c["sync"] / n
                printf "| local +dense | %.1f | (local + %.0f dense B/it at %.0f B/s) | | | | | | | | | | %.3fx | - | | |\n",
                    rms["local"] + 1e3 * db / rate, db, rate, (rms["local"] + 1e3 * db / rate) / st
            }
        }' "$tmp/rows"
    echo
    echo "Per round, time ratios measured side by side:"
    echo
    awk '{ t[$2, $1] = $3; r[$2] = 1 } END { for (k in r) { printf "- round %d:", k; sep = " "
        if (t[k, "bagpipe"] <= 0) { printf " (no bagpipe run)\n"; continue }
        if (t[k, "sync"] > 0) { printf "%sbagpipe/sync %.3f", sep, t[k, "bagpipe"] / t[k, "sync"]; sep = ", " }
        if (t[k, "local"] > 0) { printf "%sbagpipe/local %.3f", sep, t[k, "bagpipe"] / t[k, "local"]; sep = ", " }
        if (t[k, "bagpipe-fg"] > 0) printf "%sbagpipe/bagpipe-fg %.3f", sep, t[k, "bagpipe"] / t[k, "bagpipe-fg"]; printf "\n" } }' "$tmp/rows" | sort
    echo
    echo "Bytes any bit-identical protocol must move on these batches (\`build/bench/bench_commbound DATA $B $T $ITERS $D $W\`):"
    echo
    echo '```'
    cat "$tmp/lb.txt"
    echo '```'
    if ! awk '$1 == "sync" { f = 1 } END { exit !f }' "$tmp/rows"; then
        echo
        echo "(No sync run in MODES: the byte ratios against sync are not computed.)"
    else
        db=$(awk '$1 == "sync" { s += $11; c++ } END { printf "%.0f", s / c / '"$ITERS"' }' "$tmp/rows")
        sbt=$(awk '$1 == "sync" { s += $8 + $9 + $10 + $11; c++ } END { printf "%.0f", s / c / '"$ITERS"' }' "$tmp/rows")
        bbt=$(awk '$1 == "bagpipe" { s += $8 + $9 + $10 + $11; c++ } END { printf "%.0f", s / c / '"$ITERS"' }' "$tmp/rows")
        lbe=$(sed -n 's/^lower bound, embeddings: *\([0-9]*\).*/\1/p' "$tmp/lb.txt")
        awk -v db="$db" -v s="$sbt" -v b="$bbt" -v l="$lbe" -v t="$T" 'BEGIN {
            printf "\nWith the dense all-reduce (%s B/it, the same in every mode%s): lower bound %.0f B/it = %.3fx sync'"'"'s measured %s B/it (at best %.1f%% fewer bytes than sync); bagpipe measured %s B/it = %.3fx sync, %.2fx the lower bound.\n",
                db, t == 2 ? " and optimal for T = 2" : "", l + db, (l + db) / s, s, 100 * (1 - (l + db) / s), b, b / s,
                b / (l + db) }'
    fi
} > "$tmp/report.md"
cat "$tmp/report.md"
[ -n "$out" ] && cp "$tmp/report.md" "$out"
exit 0
