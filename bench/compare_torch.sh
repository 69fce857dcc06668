#!/usr/bin/env bash
# DLRM (Criteo Kaggle configuration) training throughput: bagpipe's local trainer vs PyTorch on
# this machine, side by side, alternating so both see the same machine state.
#   bench/compare_torch.sh [ITERS]
# bagpipe runs twice per round: with the BLAS kernel the environment sets (OPENBLAS_CORETYPE, the
# setting tests and CI keep), and with the kernel OpenBLAS picks for this CPU when it is unset (the
# setting of a machine without that variable; on AVX-512 CPUs the kernels PyTorch's oneDNN also
# uses).  The tables give both; "blas" in each JSON line names the kernel.
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=${1:-40}
make -s -j2 build/bench/bench_train
PY=/usr/bin/python3; [ -x $PY ] || PY=python3
for round in 1 2; do
  build/bench/bench_train "$ITERS" 128,2048 1,2
  if [ -n "${OPENBLAS_CORETYPE:-}" ]; then env -u OPENBLAS_CORETYPE build/bench/bench_train "$ITERS" 128,2048 1,2; fi
  $PY tools/torch_dlrm_bench.py --iters "$ITERS" --batch 128,2048 --threads 1,2
done | tee /dev/stderr | $PY -c '
import json, sys, collections
best = collections.defaultdict(float)
for line in sys.stdin:
    r = json.loads(line)
    impl = r["impl"] + ((" (" + r["blas"] + ")") if r["impl"] == "bagpipe" else "")
    k = (impl, r["batch"], r["threads"])
    best[k] = max(best[k], r["samples_per_s"])
ours = sorted({k[0] for k in best if k[0] != "pytorch"})
batches = sorted({k[1] for k in best})
print("\n| batch | PyTorch best samples/s | " + " | ".join(f"{o} best samples/s | ratio" for o in ours) + " |")
print("|---|---|" + "---|---|" * len(ours))
for B in batches:
    t = max(v for k, v in best.items() if k[0] == "pytorch" and k[1] == B)
    cells = []
    for o in ours:
        b = max(v for k, v in best.items() if k[0] == o and k[1] == B)
        cells += [f"{b:.0f}", f"{b/t:.2f}x"]
    print(f"| {B} | {t:.0f} | " + " | ".join(cells) + " |")
print("\n| batch | threads | PyTorch samples/s | " + " | ".join(f"{o} | ratio" for o in ours) + " |")
print("|---|---|---|" + "---|---|" * len(ours))
for B in batches:
    for th in sorted({k[2] for k in best if k[1] == B}):
        if ("pytorch", B, th) not in best:
            continue
        t = best[("pytorch", B, th)]
        cells = []
        for o in ours:
            b = best.get((o, B, th), 0.0)
            cells += [f"{b:.0f}", f"{b/t:.2f}x"]
        print(f"| {B} | {th} | {t:.0f} | " + " | ".join(cells) + " |")
'
