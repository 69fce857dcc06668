#!/bin/sh
# The benchmark suite: the BagPipe paper's experiments (skew, hit rates, iteration time and bytes by
# mode, scaling, convergence, oracle throughput) at this machine's scale, each as a Markdown table
# and a plot in a results folder with an index.md that collects them.
#
#   bench/suite.sh [--quick] [--out DIR] [--only N,...] [--no-netem]
#
# Installs missing Debian packages (scripts/deps.sh --bench) and builds what is missing (make),
# then runs bench/suite.py; with BAGPIPE_BIN set (the tests) it only runs the suite with that
# binary.  Without --quick it takes ~5 min on a quiet 2-core machine (~25 under load) and, as root, emulates 1 and 10 Gbit/s networks (bench/netem.sh); --quick takes
# about a minute (tiny data, few iterations, no emulation) and is what the tests run.
# Default DIR: results/bench-YYYYMMDD-HHMMSS.
# --help: the comment above, before anything runs.
case "${1:-}" in -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;; esac
set -eu
BAGPIPE_CALLER_DIR=$PWD # relative --out and BAGPIPE_BIN are the caller's (suite.py)
export BAGPIPE_CALLER_DIR
cd "$(dirname "$0")/.."
if [ -z "${BAGPIPE_BIN:-}" ]; then
    scripts/deps.sh --bench
    make -s -j2 build/bagpipe build/bench/bench_plan
fi
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
exec "$PY" bench/suite.py "$@"
