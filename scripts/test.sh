#!/usr/bin/env bash
# Builds everything and runs every test (the README's test command; CI runs it through .ci/run).
# The last line printed is the runner's summary: "N passed, N failed" (", K skipped" when any skipped).
#   scripts/test.sh [FILTER]     only the tests whose name contains FILTER
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
make -s -j2 all
BAGPIPE_BIN=build/bagpipe exec build/test_bagpipe "$@"
