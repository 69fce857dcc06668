#!/usr/bin/env bash
# Builds bagpipe with ASan + UBSan (make SANITIZE=address,undefined, in build-san/) and runs the
# unit tests under it: every single-process test, plus the multi-rank tests whose names contain
# one of SAN_MPI_FILTERS (default "dist_sync_t1": a sync-mode job under mpirun).  Open MPI's own
# allocations are suppressed (scripts/lsan.supp, with fast_unwind_on_malloc=0); leaks, overflows
# and undefined behaviour in bagpipe fail the test that hits them.
#
#   scripts/sanitize.sh                 build + tests (about 10-15 minutes on 2 cores)
#   SAN_MPI_FILTERS="dist_sync_t1 bagpipe_sgd" scripts/sanitize.sh
#
# Tests whose file starts mpirun jobs (tests/test_dist.c, test_bagpipe.c, test_modes.c,
# test_async.c, and test_suite.c whose quick suite runs some 14 jobs) are the multi-rank ones;
# all others run one per runner invocation.  tests/test_ckpt_run.c runs whole (its jobs are
# small: local, sync, sharded, static and bagpipe runs killed and resumed under ASan).  tests/test_badinput.c runs
# whole: its three multi-rank tests (a cache of one row and W = 0 in mode bagpipe, a peer sending
# garbage to a server) have timeouts sized for ASan on a loaded machine.  Closes with
# "N passed, N failed" over all of them; exits 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
MPI_FILES="tests/test_dist.c tests/test_bagpipe.c tests/test_modes.c tests/test_async.c tests/test_suite.c"
SAN_MPI_FILTERS="${SAN_MPI_FILTERS:-dist_sync_t1}"

make -s -j2 SANITIZE=address,undefined all || { echo "sanitize: build failed"; echo "0 passed, 1 failed"; exit 1; }

export BAGPIPE_BIN=build-san/bagpipe
export LSAN_OPTIONS="fast_unwind_on_malloc=0:suppressions=$PWD/scripts/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

names_in() { grep -ho '^TEST([A-Za-z0-9_]*)' "$@" | sed 's/^TEST(//; s/)$//'; }
single=()
for f in tests/test_*.c; do
  case " $MPI_FILES " in *" $f "*) ;; *) single+=("$f") ;; esac
done
# Single-process tests inside the multi-rank files (they call the decoder directly).
filters=($(names_in "${single[@]}") dist_msg_decode_validates async_cache_ async_bad_flags suite_table_check $SAN_MPI_FILTERS)

log=$(mktemp)
t0=$(date +%s)
declare -A seen
passed=0 failed=0 skipped=0
for flt in "${filters[@]}"; do
  build-san/test_bagpipe "$flt" > "$log" 2>&1
  # One line per test: "ok|FAIL|SKIP  name  time  (file)".
  while read -r verdict name rest; do
    [ -n "${seen[$name]:-}" ] && continue
    seen[$name]=1
    echo "$verdict $name $rest"
    case "$verdict" in
      ok) passed=$((passed + 1)) ;;
      SKIP) skipped=$((skipped + 1)) ;;
      FAIL) failed=$((failed + 1)) ;;
    esac
  done < <(grep -E '^(ok|FAIL|SKIP) ' "$log")
  if grep -qE '^FAIL ' "$log"; then
    grep -vE '^(ok|SKIP) |^total time|passed, ' "$log" | sed 's/^/    /' | head -60
  fi
  if ! grep -qE '^(ok|FAIL|SKIP) ' "$log"; then
    echo "FAIL $flt (the runner printed no result; filter matched nothing or the runner died)"
    sed 's/^/    /' "$log" | tail -20
    failed=$((failed + 1))
  fi
done
rm -f "$log"
echo
echo "sanitizers: address,undefined; total time $(( $(date +%s) - t0 ))s"
if [ $skipped -gt 0 ]; then echo "$passed passed, $failed failed, $skipped skipped"
else echo "$passed passed, $failed failed"; fi
[ $failed -eq 0 ]
