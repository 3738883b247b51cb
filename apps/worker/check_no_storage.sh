#!/bin/sh
# Fails when the given executable links libpq or SQLite, or carries their client symbols.
set -eu
bin="$1"
if readelf -d "$bin" | grep 'NEEDED' | grep -Eqi 'libpq|libsqlite'; then
  echo "FAIL: $bin links a storage driver:"; readelf -d "$bin" | grep NEEDED; exit 1
fi
if nm -C "$bin" 2>/dev/null | grep -Eq ' (PQ[a-zA-Z]+|pg_[a-z_]+|sqlite3_[a-z0-9_]+)$'; then
  echo "FAIL: $bin contains PostgreSQL or SQLite client symbols"; exit 1
fi
if nm -D -C "$bin" 2>/dev/null | grep -Eq ' (PQ[a-zA-Z]+|sqlite3_[a-z0-9_]+)$'; then
  echo "FAIL: $bin imports PostgreSQL or SQLite client symbols"; exit 1
fi
echo "OK: no storage driver in $bin"
