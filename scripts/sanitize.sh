#!/usr/bin/env bash
# Builds bagpipe with ASan + UBSan (make SANITIZE=address,undefined, in build-san/) and runs the
# unit tests under it: every single-process test, plus the multi-rank tests whose names contain
# one of SAN_MPI_FILTERS (default "dist_sync_t1": a sync-mode job under mpirun).  Open MPI's own
# allocations are suppressed (scripts/lsan.supp, with fast_unwind_on_malloc=0); leaks, overflows
# and undefined behaviour in bagpipe fail the test that hits them.
#
#   scripts/sanitize.sh                 build + tests (about 5 minutes on 2 quiet cores)
#   SAN_MPI_FILTERS="dist_sync_t1 bagpipe_sgd" scripts/sanitize.sh
#
# Tests whose file starts mpirun jobs (tests/test_dist.c, test_bagpipe.c, test_modes.c,
# test_async.c, test_bpeval.c, test_bpspeed.c, test_dist_mem.c (the plan against what ranks hold: ASan changes that), and test_suite.c whose quick suite runs some 14
# jobs) are the multi-rank ones;
# all others run in the same runner invocation.  tests/test_ckpt_run.c runs whole (its jobs are
# small: local, sync, sharded, static and bagpipe runs killed and resumed under ASan).  tests/test_badinput.c runs
# whole: its three multi-rank tests (a cache of one row and W = 0 in mode bagpipe, a peer sending
# garbage to a server) have timeouts sized for ASan on a loaded machine.  Exits 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
MPI_FILES="tests/test_dist.c tests/test_bagpipe.c tests/test_modes.c tests/test_async.c tests/test_suite.c"
MPI_FILES+=" tests/test_bpeval.c tests/test_bpspeed.c tests/test_dist_mem.c"
SAN_MPI_FILTERS="${SAN_MPI_FILTERS:-dist_sync_t1}"

scripts/deps.sh
make -s -j2 SANITIZE=address,undefined all || { echo "sanitize: build failed"; echo "0 passed, 1 failed"; exit 1; }

export BAGPIPE_BIN=build-san/bagpipe
# print_suppressions=0: a process whose leak check matched a suppression (Open MPI's, or the
# thread-stack one that the runtime hits now and then) printed a "Suppressions used" table on
# stderr at exit, so two runs of one command could print different text (a flaky failure of a test
# comparing outputs, cli_help_command_is_its_help on CI: 1 run in 60 here).
export LSAN_OPTIONS="fast_unwind_on_malloc=0:print_suppressions=0:suppressions=$PWD/scripts/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

names_in() { grep -ho '^TEST([A-Za-z0-9_]*)' "$@" | sed 's/^TEST(//; s/)$//'; }
single=()
for f in tests/test_*.c; do
  case " $MPI_FILES " in *" $f "*) ;; *) single+=("$f") ;; esac
done
# Exact names ("=NAME") for the single-process files' tests; substrings for the single-process
# tests inside the multi-rank files (they call the decoder or the cache directly) and for the
# multi-rank filters.  One runner invocation, whose last line is its summary.
args=($(names_in "${single[@]}" | sed 's/^/=/') dist_msg_decode_validates =role_keydir_matches_binary_search =async_cache_lru =async_cache_lfu =async_cache_staleness async_bad_flags
      =oracle_mem_estimate_matches_its_accounting =dist_refuses_a_job_that_does_not_fit
      =dist_mem_plan_trainer0_gathers_only_for_eval_or_save
      suite_table_check $SAN_MPI_FILTERS)
echo "sanitizers: address,undefined (build-san/)"
exec build-san/test_bagpipe "${args[@]}"
