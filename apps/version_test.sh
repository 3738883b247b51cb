#!/bin/sh
# Each executable given prints "<name> <version>" for --version and exits 0.
# Usage: version_test.sh VERSION BINARY...
set -u
version="$1"
shift
failures=0
for binary in "$@"; do
  name=$(basename "$binary")
  out=$("$binary" --version 2>&1)
  code=$?
  if [ "$code" -ne 0 ] || [ "$out" != "$name $version" ]; then
    echo "FAIL $name --version: exit $code, output '$out', want '$name $version'"
    failures=$((failures + 1))
  fi
done
[ "$failures" -eq 0 ] && echo "ok: $# executables print $version"
exit "$failures"
