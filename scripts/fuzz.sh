#!/usr/bin/env bash
# libFuzzer targets for every parser of hostile input (fuzz/fuzz_NAME.c), under ASan + UBSan.
#
#   scripts/fuzz.sh build            compile the library and every target into build/fuzz/
#   scripts/fuzz.sh run [SECONDS]    build, then run every target SECONDS each (default 10),
#                                    FUZZ_JOBS at a time (default 2); prints execs, cov, ft and
#                                    crashes per target; exits 1 if any target crashed
#   scripts/fuzz.sh long             the same with 600 s per target (the run docs/fuzzing.md reports)
#   scripts/fuzz.sh repro NAME FILE  runs one input through target NAME (for a saved crash)
#   scripts/fuzz.sh seeds            regenerate the binary seeds (fuzz/seeds.c) in fuzz/corpus/
#   scripts/fuzz.sh check            exits 0 when clang can build libFuzzer targets, else 1
#
# FUZZ_TARGETS="criteo plan" limits the run to some targets.  FUZZ_QUICK=1 compiles only the
# library sources the targets link (FUZZ_LIB_SRC below; the test suite uses it to stay fast),
# otherwise every library source is compiled, so the fuzz build also checks that all of them
# build with clang.  Each target fuzzes from its seed
# corpus fuzz/corpus/NAME (committed) plus a working corpus build/fuzz/corpus/NAME (kept between
# runs, not committed), so repeated runs add up.  A crash's reproducer is saved as
# fuzz/crashes/NAME-crash-<sha1> (not committed) and its report as build/fuzz/logs/PID/NAME.log
# (PID of the run, so that runs at the same time keep their own logs).
# Needs clang with the compiler-rt runtimes (Debian 12: clang-14 libclang-rt-14-dev), Open MPI
# headers (mpicc), OpenBLAS and zlib.
set -euo pipefail
cd "$(dirname "$0")/.."

CLANG="${FUZZ_CC:-}"
if [ -z "$CLANG" ]; then
  for c in clang clang-14 clang-15 clang-16; do
    if command -v "$c" >/dev/null 2>&1; then CLANG="$c"; break; fi
  done
fi
OUT=build/fuzz
ALL_TARGETS=$(ls fuzz/fuzz_*.c | sed 's|fuzz/fuzz_||; s|\.c$||')
TARGETS="${FUZZ_TARGETS:-$ALL_TARGETS}"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
CFLAGS="-O1 -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wno-unused-parameter -fno-strict-aliasing -pthread -Isrc"
LIBS="-lopenblas -lz -lm -pthread"
# What the targets link (the archive pulls only these); a target that needs another source fails
# to link under FUZZ_QUICK=1 until it is added here.
FUZZ_LIB_SRC="common cli launch model nn data_criteo data_avazu data_lines data_bin ckpt plan msg"

have_fuzzer() {
  [ -n "$CLANG" ] || return 1
  command -v mpicc >/dev/null 2>&1 || return 1
  local d; d=$(mktemp -d)
  printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return (int)(n & 0); }\n' > "$d/t.c"
  local ok=0
  "$CLANG" -fsanitize=fuzzer,address,undefined "$d/t.c" -o "$d/t" >/dev/null 2>&1 || ok=1
  rm -rf "$d"
  return $ok
}

build() {
  if ! have_fuzzer; then
    echo "fuzz: no clang with libFuzzer (install clang-14 libclang-rt-14-dev) or no mpicc" >&2
    exit 2
  fi
  local mpi_inc mpi_link
  mpi_inc=$(mpicc --showme:compile)
  mpi_link=$(mpicc --showme:link)
  mkdir -p "$OUT/obj"
  # Recompile a library source when it or any header is newer than its object.
  local newest_h stale=()
  newest_h=$(ls -t src/*.h | head -1)
  local srcs
  if [ -n "${FUZZ_QUICK:-}" ]; then srcs=$(for s in $FUZZ_LIB_SRC; do echo "src/$s.c"; done)
  else srcs=$(ls src/*.c | grep -v '^src/main\.c$'); fi
  for src in $srcs; do
    local obj="$OUT/obj/$(basename "${src%.c}").o"
    if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ] || [ "$newest_h" -nt "$obj" ]; then stale+=("$src"); fi
  done
  if [ ${#stale[@]} -gt 0 ]; then
    echo "fuzz: compiling ${#stale[@]} library sources" >&2
    printf '%s\n' "${stale[@]}" | xargs -P "${FUZZ_JOBS:-2}" -I{} sh -c \
      "$CLANG $CFLAGS $SAN -fsanitize=fuzzer-no-link $mpi_inc -c -o $OUT/obj/\$(basename {} .c).o {}"
    rm -f "$OUT/libbagpipe.a"
  fi
  # Objects of sources that no longer exist must not linger in the archive.
  for obj in "$OUT"/obj/*.o; do
    [ -f "src/$(basename "${obj%.o}").c" ] || { rm -f "$obj" "$OUT/libbagpipe.a"; }
  done
  local nobj; nobj=$(ls "$OUT"/obj/*.o | wc -l)
  if [ ! -f "$OUT/libbagpipe.a" ] || [ "$(ar t "$OUT/libbagpipe.a" | wc -l)" != "$nobj" ]; then
    rm -f "$OUT/libbagpipe.a"
    ar rcs "$OUT/libbagpipe.a" "$OUT"/obj/*.o
  fi
  for t in $ALL_TARGETS; do
    local bin="$OUT/fuzz_$t"
    if [ ! -f "$bin" ] || [ "fuzz/fuzz_$t.c" -nt "$bin" ] || [ fuzz/fuzz_util.h -nt "$bin" ] ||
       [ "$OUT/libbagpipe.a" -nt "$bin" ]; then
      "$CLANG" $CFLAGS $SAN -fsanitize=fuzzer $mpi_inc -Ifuzz -o "$bin" "fuzz/fuzz_$t.c" \
        "$OUT/libbagpipe.a" $mpi_link $LIBS
    fi
  done
}

# Longest input per target: room for a dataset header plus rows, or a few lines.
max_len() {
  case "$1" in
    ds_open) echo 65536 ;;
    ds_header) echo 4200 ;;
    lines|manifest|criteo|avazu) echo 16384 ;;
    plan) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

# Runs one target for $2 seconds; writes "NAME execs cov ft crashes" to $LOGS/NAME.sum.
run_one() {
  local t="$1" secs="$2" log="$LOGS/$1.log"
  mkdir -p "$OUT/corpus/$t" fuzz/crashes "$LOGS"
  local rc=0
  # -close_fd_mask=1 hides the targets' stdout (usage text); reports go to stderr.
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}" \
  UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
    timeout -k 10 $((secs + 60)) "$OUT/fuzz_$t" -max_total_time="$secs" -max_len="$(max_len "$t")" \
      -timeout=10 -rss_limit_mb=2048 -close_fd_mask=1 -print_final_stats=1 \
      -artifact_prefix="fuzz/crashes/$t-" "$OUT/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  local execs cov ft
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2 || true)
  ft=$(grep -Eo 'ft: [0-9]+' "$log" | tail -1 | cut -d' ' -f2 || true)
  local crashes=0
  [ $rc -ne 0 ] && crashes=1
  echo "$t ${execs:-?} ${cov:-?} ${ft:-?} $crashes $rc" > "$LOGS/$t.sum"
}

run() {
  local secs="${1:-10}"
  build
  LOGS="$OUT/logs/$$"
  rm -rf "$LOGS"
  mkdir -p "$LOGS"
  local jobs="${FUZZ_JOBS:-2}" running=0
  for t in $TARGETS; do
    run_one "$t" "$secs" &
    running=$((running + 1))
    if [ $running -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
  done
  wait || true
  local failed=0
  printf '%-10s %12s %7s %7s %8s\n' target execs cov ft crashes
  for t in $TARGETS; do
    local name execs cov ft crashes rc
    read -r name execs cov ft crashes rc < "$LOGS/$t.sum"
    printf '%-10s %12s %7s %7s %8s\n' "$name" "$execs" "$cov" "$ft" "$crashes"
    if [ "$crashes" != 0 ]; then
      failed=1
      echo "fuzz: $t failed (exit $rc); report: $LOGS/$t.log" >&2
      grep -E 'ERROR: |runtime error|fuzz invariant|Test unit written|SUMMARY' "$LOGS/$t.log" | head -8 >&2 || true
    fi
  done
  return $failed
}

case "${1:-}" in
  check) have_fuzzer ;;
  build) build ;;
  run) run "${2:-10}" ;;
  long) run 600 ;;
  seeds)
    build
    "$CLANG" $CFLAGS $SAN $(mpicc --showme:compile) -o "$OUT/seeds" fuzz/seeds.c "$OUT/libbagpipe.a" \
      $(mpicc --showme:link) $LIBS
    "$OUT/seeds" fuzz/corpus ;;
  repro)
    build
    "$OUT/fuzz_$2" -close_fd_mask=1 "$3" ;;
  *) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
