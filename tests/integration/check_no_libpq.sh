#!/bin/sh
# Fails when the given executable links libpq or carries PostgreSQL client symbols.
set -eu
bin="$1"
if readelf -d "$bin" | grep -i 'NEEDED' | grep -qi 'libpq'; then
  echo "FAIL: $bin has libpq in its NEEDED entries"; exit 1
fi
if nm -C "$bin" 2>/dev/null | grep -Eq ' (PQ[a-zA-Z]+|pg_[a-z_]+)$'; then
  echo "FAIL: $bin contains PostgreSQL client symbols"; exit 1
fi
if nm -D -C "$bin" 2>/dev/null | grep -Eq ' (PQ[a-zA-Z]+)$'; then
  echo "FAIL: $bin imports PostgreSQL client symbols"; exit 1
fi
readelf -d "$bin" | grep NEEDED | sed 's/.*\[\(.*\)\]/\1/' | tr '\n' ' '
echo
echo "OK: no libpq in $bin"
