#!/usr/bin/env bash
# DLRM (Criteo Kaggle configuration) training throughput: bagpipe's local trainer vs PyTorch on
# this machine, side by side, alternating so both see the same machine state.
#   bench/compare_torch.sh [ITERS]
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=${1:-40}
make -s -j2 build/bench/bench_train
PY=/usr/bin/python3; [ -x $PY ] || PY=python3
for round in 1 2; do
  build/bench/bench_train "$ITERS" 128,2048 1,2
  $PY tools/torch_dlrm_bench.py --iters "$ITERS" --batch 128,2048 --threads 1,2
done | tee /dev/stderr | $PY -c '
import json, sys, collections
best = collections.defaultdict(float)
for line in sys.stdin:
    r = json.loads(line)
    k = (r["impl"], r["batch"], r["threads"])
    best[k] = max(best[k], r["samples_per_s"])
print("\n| batch | bagpipe best samples/s | PyTorch best samples/s | ratio |")
print("|---|---|---|---|")
for B in sorted({k[1] for k in best}):
    b = max(v for k, v in best.items() if k[0] == "bagpipe" and k[1] == B)
    t = max(v for k, v in best.items() if k[0] == "pytorch" and k[1] == B)
    print(f"| {B} | {b:.0f} | {t:.0f} | {b/t:.2f}x |")
print("\n| batch | threads | bagpipe best samples/s | PyTorch best samples/s | ratio |")
print("|---|---|---|---|---|")
for (impl, B, th), b in sorted(best.items(), key=lambda kv: (kv[0][1], kv[0][2])):
    if impl != "bagpipe" or ("pytorch", B, th) not in best:
        continue
    t = best[("pytorch", B, th)]
    print(f"| {B} | {th} | {b:.0f} | {t:.0f} | {b/t:.2f}x |")
'
