#!/usr/bin/env bash
# Soak benchmark: one long `bagpipe train --mode bagpipe` job (T = 2 trainers, S = 1 server, a tiny
# DLRM, a small cache, many epochs over a small synthetic dataset) whose resident memory per role,
# cache residency, hit rate and throughput are sampled over time, to show that none of them drifts.
#
#   bench/soak.sh [--iters N] [--minutes M] [--every SEC] [--out DIR] [--batch-size B] [--cache-rows C]
#
#   --iters N      iterations to train (default 3000000)
#   --minutes M    stop the job after M minutes even if the iterations are not done (default 0: no
#                  limit); the samples taken until then are the result
#   --every SEC    sampling period in seconds (default 10)
#   --out DIR      where everything goes (default results/soak)
#
# Writes DIR/soak.tsv, one line per sample: elapsed seconds, iteration, iterations/s over the
# period, the job's last metrics line (samples/s, hit rate, mean residency, capacity), VmRSS in KiB
# of the launcher, mpirun, the oracle, the server and both trainers, the 1-minute load average, and
# CPU milliseconds per iteration of each rank (which, unlike iterations/s, depends little on what
# else runs on the machine).  Also DIR/soak.png (gnuplot, when installed), DIR/metrics.jsonl,
# DIR/train.log and DIR/verdict.txt: the mean of every column over the first and the last quarter
# of the samples (leaving out the first minute, the warm-up, and the last sample, which may catch
# the ranks exiting), RSS growth in % per role, and the last/first ratios of throughput, CPU time
# per iteration and residency.  The verdict is printed; the script never fails on figures (exit 1
# only when the job itself fails or nothing was sampled).
#
# 3M iterations (the default) take about 3 minutes on a 2-core machine (17-19K iterations/s on the
# Zen 4 machine of 2026-12-05; 1M took 132 s with an earlier build on an earlier machine): the
# verdict leaves out the first minute, so a much shorter run has nothing to judge.  Ranks are
# found as the descendants of the launcher with OMPI_COMM_WORLD_RANK in their environment; rank
# 0 is the oracle, rank 1 the server, ranks 2-3 the trainers.
set -u
CALLER_DIR=$PWD
cd "$(dirname "$0")/.."

ITERS=3000000 MINUTES=0 EVERY=10 OUTDIR=results/soak BATCH=32 CACHE=256
while [ $# -gt 0 ]; do
  case "$1" in
    --iters) ITERS="$2"; shift 2 ;;
    --minutes) MINUTES="$2"; shift 2 ;;
    --every) EVERY="$2"; shift 2 ;;
    --out) OUTDIR="$2"; shift 2 ;;
    --batch-size) BATCH="$2"; shift 2 ;;
    --cache-rows) CACHE="$2"; shift 2 ;;
    -h|--help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak: unknown option '$1' (see bench/soak.sh --help)" >&2; exit 2 ;;
  esac
done
# Whole numbers only (bash arithmetic), checked before any work starts.
for v in "--iters:$ITERS" "--minutes:$MINUTES" "--every:$EVERY" "--batch-size:$BATCH" "--cache-rows:$CACHE"; do
  case "${v#*:}" in
    ''|*[!0-9]*) echo "soak: ${v%%:*}: expected a whole number, got '${v#*:}'" >&2; exit 2 ;;
  esac
done
# Relative paths are the caller's, not the repository's (this script works from the repository).
case "$OUTDIR" in /*) ;; *) OUTDIR="$CALLER_DIR/$OUTDIR" ;; esac
BIN="${BAGPIPE_BIN:-build/bagpipe}"
case "$BIN" in /*|build/bagpipe) ;; *) BIN="$CALLER_DIR/$BIN" ;; esac
[ -x "$BIN" ] || { echo "soak: $BIN not found: run make first" >&2; exit 2; }
mkdir -p "$OUTDIR"
DATA="$OUTDIR/soak.bin" TSV="$OUTDIR/soak.tsv" MET="$OUTDIR/metrics.jsonl" LOG="$OUTDIR/train.log"
rm -f "$TSV" "$MET" "$LOG"
# (No -e: probes of processes that come and go may fail; every step that matters is checked.)

# 20000 samples, 5 tables (20..20000 rows), 4 dense features: 500 iterations of 32 per epoch.
"$BIN" synth --preset custom --tables 20,300,2000,8000,20000 --dense 4 -n 20000 --seed 7 \
  --split ratio:0.8,0.1,0.1 -o "$DATA" > "$OUTDIR/synth.log" 2>&1 ||
  { echo "soak: synth failed: $(tail -3 "$OUTDIR/synth.log")" >&2; exit 1; }

PRINT_EVERY=$(( ITERS >= 100000 ? 1000 : (ITERS >= 1000 ? ITERS / 100 : 10) ))
"$BIN" train --mode bagpipe --trainers 2 --servers 1 --cache-rows "$CACHE" --lookahead 16 --prefetch 2 \
  --arch-mlp-bot 4-16-8 --arch-mlp-top 16-1 --arch-sparse-feature-size 8 --batch-size "$BATCH" \
  --learning-rate 0.05 --emb-optimizer adagrad --iters "$ITERS" --print-every "$PRINT_EVERY" --no-eval \
  -m "$MET" "$DATA" > "$LOG" 2>&1 &
JOB=$!
# However this script ends (an error, a signal), the job it started does not run on alone.
trap 'kill -TERM "$JOB" 2>/dev/null' EXIT

# Descendants of $1 (pids, one a line).
descendants() {
  local kids; kids=$(cat /proc/"$1"/task/*/children 2>/dev/null || true)
  for k in $kids; do echo "$k"; descendants "$k"; done
}
rss_of() { awk '/^VmRSS:/ {print $2; f=1} END {if (!f) print "NA"}' /proc/"$1"/status 2>/dev/null || echo NA; }
# CPU time (user + system, clock ticks) of a process so far.
ticks_of() { awk '{print $14 + $15}' /proc/"$1"/stat 2>/dev/null || echo NA; }
HZ=$(getconf CLK_TCK)
rank_of() { tr '\0' '\n' < /proc/"$1"/environ 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p' | head -1; }

printf 't_s\titer\titers_per_s\tsamples_per_s\thit_rate\tresident_mean\tcache_rows\trss_launcher_kb\trss_mpirun_kb\trss_oracle_kb\trss_server0_kb\trss_trainer0_kb\trss_trainer1_kb\tload1\tcpu_ms_per_iter_oracle\tcpu_ms_per_iter_server0\tcpu_ms_per_iter_trainer0\tcpu_ms_per_iter_trainer1\n' > "$TSV"
T0=$(date +%s.%N)
prev_t=0 prev_iter=0
declare -A ROLE_PID=() CPU_T=() CPU_I=()
deadline=$(( MINUTES > 0 ? MINUTES * 60 : 0 ))
# Ctrl-C or a TERM of this script stops the job and still gives the verdict of what was sampled.
STOPPED=0
trap 'STOPPED=1' INT TERM
while kill -0 "$JOB" 2>/dev/null; do
  sleep "$EVERY" & wait $! 2>/dev/null
  if [ $STOPPED -eq 1 ]; then
    echo "soak: interrupted: stopping the job" >&2
    kill -TERM "$JOB" 2>/dev/null || true
    break
  fi
  kill -0 "$JOB" 2>/dev/null || break
  now=$(date +%s.%N)
  t=$(awk -v a="$now" -v b="$T0" 'BEGIN { printf "%.1f", a - b }')
  # (Re)discover the ranks until all four are known.
  if [ ${#ROLE_PID[@]} -lt 5 ]; then
    for p in $(descendants "$JOB"); do
      r=$(rank_of "$p")
      comm=$(cat /proc/"$p"/comm 2>/dev/null || true)
      if [ -n "$r" ]; then
        case "$r" in 0) ROLE_PID[oracle]=$p ;; 1) ROLE_PID[server0]=$p ;; 2) ROLE_PID[trainer0]=$p ;; 3) ROLE_PID[trainer1]=$p ;; esac
      elif [ "$comm" = mpirun ] || [ "$comm" = orterun ]; then
        ROLE_PID[mpirun]=$p
      fi
    done
  fi
  line=$(grep '"event":"train"' "$MET" 2>/dev/null | tail -1 || true)
  field() { echo "$line" | grep -o "\"$1\":[-0-9.eE+]*" | head -1 | cut -d: -f2; }
  iter=$(field iter); iter=${iter:-0}
  ips=$(awk -v i="$iter" -v pi="$prev_iter" -v t="$t" -v pt="$prev_t" 'BEGIN { d = t - pt; printf "%.1f", (d > 0 ? (i - pi) / d : 0) }')
  prev_t=$t prev_iter=$iter
  sps=$(field samples_per_s) hr=$(field hit_rate) res=$(field resident_mean) cr=$(field cache_rows)
  rl=$(rss_of "$JOB")
  row="$t\t$iter\t$ips\t${sps:-NA}\t${hr:-NA}\t${res:-NA}\t${cr:-NA}\t$rl"
  for role in mpirun oracle server0 trainer0 trainer1; do
    p=${ROLE_PID[$role]:-}
    row="$row\t$( [ -n "$p" ] && rss_of "$p" || echo NA )"
  done
  row="$row\t$(cut -d' ' -f1 /proc/loadavg)"
  # CPU milliseconds per iteration of each rank since the last sample at which the iteration count
  # moved (NA at the others): unlike iterations/s, it does not fall when other work shares the cores.
  for role in oracle server0 trainer0 trainer1; do
    p=${ROLE_PID[$role]:-} ms=NA
    if [ -n "$p" ]; then
      tk=$(ticks_of "$p")
      if [ "$tk" != NA ] && [ -n "${CPU_T[$role]:-}" ] && [ "$iter" -gt "${CPU_I[$role]}" ]; then
        ms=$(awk -v a="$tk" -v b="${CPU_T[$role]}" -v i="$iter" -v j="${CPU_I[$role]}" -v hz="$HZ" \
          'BEGIN { printf "%.4f", (a - b) * 1000 / hz / (i - j) }')
      fi
      if [ "$tk" != NA ] && { [ -z "${CPU_T[$role]:-}" ] || [ "$iter" -gt "${CPU_I[$role]}" ]; }; then
        CPU_T[$role]=$tk CPU_I[$role]=$iter
      fi
    fi
    row="$row\t$ms"
  done
  printf "$row\n" >> "$TSV"
  if [ "$deadline" -gt 0 ] && awk -v t="$t" -v d="$deadline" 'BEGIN { exit !(t >= d) }'; then
    echo "soak: $MINUTES minutes are up at iteration $iter: stopping the job" >&2
    STOPPED=1
    kill -TERM "$JOB" 2>/dev/null || true
    break
  fi
done
rc=0
wait "$JOB" || rc=$?
failed=0
if [ $STOPPED -eq 0 ] && [ $rc -ne 0 ]; then
  echo "soak: the job failed (exit $rc); its output:" >&2
  tail -20 "$LOG" >&2
  failed=1
fi
nsamples=$(( $(wc -l < "$TSV") - 1 ))
[ "$nsamples" -gt 0 ] || { echo "soak: no samples (the job ended within $EVERY s); see $LOG" >&2; exit 1; }

# Verdict: first vs last quarter of the samples taken after the first minute.
awk -F'\t' -v iters="$ITERS" '
  NR == 1 { for (i = 1; i <= NF; i++) name[i] = $i; nf = NF; next }
  $1 >= 60 && $2 > 0 { n++; for (i = 1; i <= nf; i++) v[n, i] = $i }
  END {
    if (n > 0) n--  # the last sample may be taken while the ranks exit
    if (n < 8) { printf "verdict: only %d samples after the first minute: too short to judge\n", n; exit }
    q = int(n / 4)
    printf "soak: %d samples over %.0f s, iterations %d..%d of %d\n", n, v[n, 1], v[1, 2], v[n, 2], iters
    printf "%-18s %14s %14s %9s\n", "column", "first quarter", "last quarter", "change"
    for (i = 3; i <= nf; i++) {
      a = 0; b = 0; na = 0; nb = 0
      for (k = 1; k <= q; k++) if (v[k, i] != "NA") { a += v[k, i]; na++ }
      for (k = n - q + 1; k <= n; k++) if (v[k, i] != "NA") { b += v[k, i]; nb++ }
      if (!na || !nb) continue
      a /= na; b /= nb
      m[name[i], "a"] = a; m[name[i], "b"] = b
      printf "%-18s %14.4g %14.4g %+8.2f%%\n", name[i], a, b, a ? 100 * (b - a) / a : 0
    }
    line = "verdict:"
    split("rss_oracle_kb rss_server0_kb rss_trainer0_kb rss_trainer1_kb rss_mpirun_kb rss_launcher_kb", roles, " ")
    for (r = 1; r <= 6; r++) if ((roles[r], "a") in m && m[roles[r], "a"] > 0)
      line = line sprintf(" %s %+.2f%%", substr(roles[r], 5, length(roles[r]) - 7), 100 * (m[roles[r], "b"] - m[roles[r], "a"]) / m[roles[r], "a"])
    split("oracle server0 trainer0 trainer1", cr, " ")
    for (r = 1; r <= 4; r++) if (("cpu_ms_per_iter_" cr[r], "a") in m && m["cpu_ms_per_iter_" cr[r], "a"] > 0)
      line = line sprintf("; %s CPU/iter last/first %.3f", cr[r], m["cpu_ms_per_iter_" cr[r], "b"] / m["cpu_ms_per_iter_" cr[r], "a"])
    if (("iters_per_s", "a") in m && m["iters_per_s", "a"] > 0)
      line = line sprintf("; throughput last/first %.3f", m["iters_per_s", "b"] / m["iters_per_s", "a"])
    if (("resident_mean", "a") in m && m["resident_mean", "a"] > 0)
      line = line sprintf("; residency last/first %.3f", m["resident_mean", "b"] / m["resident_mean", "a"])
    print line
  }' "$TSV" | tee "$OUTDIR/verdict.txt"

if command -v gnuplot >/dev/null 2>&1; then
  gnuplot -e "tsv='$TSV'; png='$OUTDIR/soak.png'; batch=$BATCH" tools/soak_plot.gp && echo "soak: plot in $OUTDIR/soak.png"
else
  echo "soak: gnuplot not installed: no plot" >&2
fi
echo "soak: samples in $TSV, job output in $LOG"
exit $failed
