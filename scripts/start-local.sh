#!/bin/sh
# Quick start: installs dependencies, builds, and runs the local daemon on ./data
# (SQLite, standalone profile, http://127.0.0.1:5700). Extra arguments go to `ql-local serve`.
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
exec ./build/bin/ql-local serve --data ./data "$@"
