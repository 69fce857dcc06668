#!/usr/bin/env bash
# DLRM (Criteo Kaggle configuration) training throughput: bagpipe's local trainer vs PyTorch on
# this machine, side by side, alternating so both see the same machine state.
#   bench/compare_torch.sh [ITERS]
# Debian's PyTorch does its float32 products through the system BLAS, OpenBLAS, so the kernel
# OpenBLAS runs is the same for both programs and is held equal in each comparison: once with the
# kernel the environment sets (OPENBLAS_CORETYPE, the setting tests and CI keep), and, when that
# variable is set, once more with it unset (the kernel OpenBLAS picks for this CPU, as on a
# machine without the variable).  "blas" in each JSON line names the kernel.  PyTorch runs at 1
# and 2 threads of its own, each under OPENBLAS_NUM_THREADS=1 and =2 (its BLAS pool is separate:
# one BLAS thread is its best at batch 128, two at 2048 here), and its best pair is the yardstick;
# bagpipe runs at 1 and 2 threads (--threads: its products and stages share one pool).
# --help: the comment above, before anything runs.
case "${1:-}" in -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=${1:-40}
make -s -j2 build/bench/bench_train
PY=/usr/bin/python3; [ -x $PY ] || PY=python3
kernels=(env)
if [ -n "${OPENBLAS_CORETYPE:-}" ]; then kernels+=(unset); fi
for round in 1 2; do
  for k in "${kernels[@]}"; do
    run=(); [ "$k" = unset ] && run=(env -u OPENBLAS_CORETYPE)
    "${run[@]}" build/bench/bench_train "$ITERS" 128,2048 1,2
    for bt in 1 2; do
      OPENBLAS_NUM_THREADS=$bt "${run[@]}" $PY tools/torch_dlrm_bench.py --iters "$ITERS" --batch 128,2048 --threads 1,2
    done
  done
done | tee /dev/stderr | $PY -c '
import json, sys, collections
best = collections.defaultdict(float)
for line in sys.stdin:
    r = json.loads(line)
    k = (r["impl"], r["blas"], r["batch"], r["threads"])
    best[k] = max(best[k], r["samples_per_s"])
kernels = sorted({k[1] for k in best})
batches = sorted({k[2] for k in best})
def top(impl, blas, B, th=None):
    v = [x for k, x in best.items() if k[:3] == (impl, blas, B) and (th is None or k[3] == th)]
    return max(v) if v else 0.0
print("\nBest of 1-2 threads each (PyTorch: also of 1-2 BLAS threads); bagpipe and PyTorch on the")
print("same OpenBLAS kernel in each row.")
print("\n| kernel | batch | PyTorch samples/s | bagpipe samples/s | ratio |")
print("|---|---|---|---|---|")
for K in kernels:
    for B in batches:
        t, b = top("pytorch", K, B), top("bagpipe", K, B)
        print(f"| {K} | {B} | {t:.0f} | {b:.0f} | {b / t:.2f}x |")
print("\n| kernel | batch | threads | PyTorch samples/s | bagpipe samples/s | ratio |")
print("|---|---|---|---|---|---|")
for K in kernels:
    for B in batches:
        for th in sorted({k[3] for k in best if k[1] == K and k[2] == B}):
            t, b = top("pytorch", K, B, th), top("bagpipe", K, B, th)
            print(f"| {K} | {B} | {th} | {t:.0f} | {b:.0f} | {b / t:.2f}x |")
'
