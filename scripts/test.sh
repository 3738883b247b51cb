#!/bin/sh
# Installs dependencies, builds, and runs the whole test suite (unit, contract, integration,
# PostgreSQL included; tests that need PostgreSQL start their own server on loopback), then a
# short run of every libFuzzer target (scripts/fuzz.sh: Clang build in build-fuzz/,
# QL_FUZZ_SECONDS per target, 0 to skip).
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
ctest --test-dir build --output-on-failure -j"${QL_TEST_JOBS:-2}" "$@"
./scripts/fuzz.sh
