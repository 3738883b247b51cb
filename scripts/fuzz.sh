#!/bin/sh
# Builds the libFuzzer targets of fuzz/ with Clang into ./build-fuzz (-DQL_FUZZ=ON: address and
# undefined-behaviour sanitizers) and runs each for a short while over its seed corpus
# (fuzz/corpus/<name>/). Fails on the first crash, leak, undefined behaviour or broken
# invariant; the input that caused it is left in build-fuzz/artifacts/ (fuzz/README.md says how
# it becomes a regression test).
#
#   scripts/fuzz.sh [NAME...]   only these targets (http_request, cron, ...); default all
#   QL_FUZZ_SECONDS=N           seconds per target (default 20; 0 skips fuzzing altogether)
#   QL_JOBS=N                   build parallelism (default 2)
set -eu
cd "$(dirname "$0")/.."
SECONDS_EACH="${QL_FUZZ_SECONDS:-20}"
[ "$SECONDS_EACH" -eq 0 ] && exit 0
BUILD=build-fuzz
ALL="http_request http_target api_body task_spec cron timezone canonical_json"

CC="${QL_FUZZ_CC:-clang-14}" CXX="${QL_FUZZ_CXX:-clang++-14}" \
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQL_FUZZ=ON -DQL_BUILD_BENCH=OFF \
  >/dev/null
cmake --build "$BUILD" -j"${QL_JOBS:-2}" --target ql_fuzzers

dict_of() {
  case "$1" in
    http_request | http_target) echo fuzz/dict/http.dict ;;
    cron | timezone) echo fuzz/dict/cron.dict ;;
    *) echo fuzz/dict/json.dict ;;
  esac
}

mkdir -p "$BUILD/artifacts"
start=$(date +%s)
for name in ${*:-$ALL}; do
  # New inputs go to the first directory (build-fuzz/corpus/NAME), never to the seeds.
  work="$BUILD/corpus/$name"
  log="$BUILD/fuzz-$name.log"
  mkdir -p "$work"
  if ! "$BUILD/fuzz/${name}_fuzzer" -max_total_time="$SECONDS_EACH" -timeout=10 \
      -rss_limit_mb=2048 -dict="$(dict_of "$name")" -artifact_prefix="$BUILD/artifacts/$name-" \
      -print_final_stats=1 "$work" "fuzz/corpus/$name" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz: $name FAILED (log $log; input in $BUILD/artifacts/, see fuzz/README.md)" >&2
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  echo "fuzz: $name ok (${runs:-?} runs, ${rate:-?} exec/s)"
done
echo "fuzz: all ok in $(($(date +%s) - start)) s"
