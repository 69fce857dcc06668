#!/usr/bin/env bash
# Builds everything and runs every test (the README's test command).
# The last line printed is the summary: "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
make -s -j2 all
make -s test
