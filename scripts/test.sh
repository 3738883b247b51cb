#!/bin/sh
# Installs dependencies (the test OpenID provider too), builds, and runs the whole test suite (unit, contract, integration,
# PostgreSQL included; tests that need PostgreSQL start their own server on loopback), then a
# short run of every libFuzzer target (scripts/fuzz.sh: Clang build in build-fuzz/,
# QL_FUZZ_SECONDS per target, 0 to skip).
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
# The OpenID Connect provider the single sign-on tests sign in against (Node.js, npm).
./scripts/install-oidc-provider.sh
./scripts/build.sh
ctest --test-dir build --output-on-failure -j"${QL_TEST_JOBS:-2}" "$@"
./scripts/fuzz.sh
