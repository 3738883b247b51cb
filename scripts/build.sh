#!/bin/sh
# Configures and builds everything into ./build (executables in build/bin/).
set -eu
cd "$(dirname "$0")/.."
BUILD_TYPE="${QL_BUILD_TYPE:-RelWithDebInfo}"
cmake -S . -B build -DCMAKE_BUILD_TYPE="$BUILD_TYPE" >/dev/null
cmake --build build -j"${QL_JOBS:-2}"
