#!/bin/sh
# The Debian packages as an operator meets them (deploy/debian/README.md): builds them with
# scripts/package.sh, installs them with dpkg -i on this machine, checks the units with
# systemd-analyze verify, starts ql-local from the installed paths with the packaged settings
# as the qinglong user, runs a task through the installed ql, refuses a bad settings line
# naming it, then removes (data kept) and purges (data deleted, and said so).
# Needs root (dpkg); exits 77 (skipped) otherwise. Leaves the machine without the packages.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$(id -u)" -ne 0 ]; then
  echo "skipped: installing packages needs root"
  exit 77
fi
PACKAGES="qinglong-local qinglong-cluster qinglong-worker qinglong-cli"
TMP=$(mktemp -d)
DAEMON=""
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
cleanup() {
  [ -n "$DAEMON" ] && kill "$DAEMON" 2>/dev/null || true
  # shellcheck disable=SC2086
  dpkg --purge $PACKAGES >/dev/null 2>&1 || true
  rm -rf "$TMP"
}
# The test installs and purges its own packages: it never touches an installation it did not
# make (its data would be purged), nor data an earlier one left behind (a database of another
# build would not open).
# shellcheck disable=SC2086
if dpkg-query -W -f='${db:Status-Status}\n' $PACKAGES 2>/dev/null | grep -qv '^not-installed$'; then
  fail "qinglong packages are installed here; purge them first (dpkg --purge $PACKAGES)"
fi
if [ -e /var/lib/qinglong ] || [ -e /etc/qinglong ]; then
  fail "/var/lib/qinglong or /etc/qinglong exists (left by an earlier installation); remove it first"
fi
trap cleanup EXIT

"$ROOT/scripts/package.sh" >"$TMP/package.log" 2>&1 || {
  cat "$TMP/package.log"
  fail "scripts/package.sh failed"
}
cd "$ROOT/build/packages"
for pkg in $PACKAGES; do
  [ "$(ls "$pkg"_*.deb | wc -l)" -eq 1 ] || fail "no single $pkg .deb in build/packages"
done
dpkg-deb -I qinglong-local_*.deb conffiles | grep -qx /etc/qinglong/ql-local.conf ||
  fail "ql-local.conf is not a conffile"
dpkg-deb -f qinglong-local_*.deb Depends | grep -q "libsqlite3-0" ||
  fail "qinglong-local does not depend on libsqlite3-0"
if dpkg-deb -f qinglong-local_*.deb Depends | grep -q libpq; then
  fail "qinglong-local depends on libpq"
fi
dpkg-deb -f qinglong-cluster_*.deb Depends | grep -q "libpq5" ||
  fail "qinglong-cluster does not depend on libpq5"

echo "== install"
dpkg -i ./*.deb >"$TMP/install.log" 2>&1 || {
  cat "$TMP/install.log"
  fail "dpkg -i failed"
}
id qinglong >/dev/null || fail "no system user qinglong"
[ "$(stat -c '%U:%G %a' /var/lib/qinglong/local)" = "qinglong:qinglong 750" ] ||
  fail "/var/lib/qinglong/local is $(stat -c '%U:%G %a' /var/lib/qinglong/local)"
[ "$(stat -c '%U:%G %a' /etc/qinglong/ql-local.conf)" = "root:qinglong 640" ] ||
  fail "/etc/qinglong/ql-local.conf is $(stat -c '%U:%G %a' /etc/qinglong/ql-local.conf)"
[ "$(readlink -f /usr/bin/ql-local)" = /usr/lib/qinglong/ql-local ] || fail "/usr/bin/ql-local"
[ -f /usr/lib/qinglong/libql-notify.so ] || fail "no libql-notify.so beside ql-local"
/usr/bin/ql --version | grep -q "^ql " || fail "ql --version"

echo "== systemd-analyze verify"
units="/lib/systemd/system/qinglong-local.service /lib/systemd/system/qinglong-cluster.service \
  /lib/systemd/system/qinglong-worker.service"
# shellcheck disable=SC2086
systemd-analyze verify $units >"$TMP/verify.log" 2>&1 || {
  cat "$TMP/verify.log"
  fail "systemd-analyze verify failed"
}
if grep -q qinglong "$TMP/verify.log"; then
  cat "$TMP/verify.log"
  fail "systemd-analyze verify warns about the units"
fi

echo "== ql-local from the installed paths, packaged settings, as qinglong"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# The unit's command line, the listen address overridden by a flag (flags override the file).
runuser -u qinglong -- /usr/bin/ql-local serve --config /etc/qinglong/ql-local.conf \
  --listen "127.0.0.1:$PORT" >"$TMP/daemon.log" 2>&1 &
DAEMON=$!
ready=""
for _ in $(seq 1 100); do
  if curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; then
    ready=yes
    break
  fi
  sleep 0.1
done
[ -n "$ready" ] || {
  cat "$TMP/daemon.log"
  fail "the installed ql-local did not become ready"
}
[ -f /var/lib/qinglong/local/db/qinglong.db ] || fail "the database is not in /var/lib/qinglong/local"
[ "$(stat -c %U /var/lib/qinglong/local/db/qinglong.db)" = qinglong ] || fail "database owner"
grep -q "command isolation: user-namespace" "$TMP/daemon.log" || {
  cat "$TMP/daemon.log"
  fail "commands are not confined in user namespaces under the qinglong user"
}
QL="/usr/bin/ql --data /var/lib/qinglong/local"
$QL task add hello --shell 'echo hello from the package; echo "uid $(id -u)"' >/dev/null ||
  fail "ql task add"
# --follow prints the run's log as it is written and exits with the run's outcome.
out=$($QL run start hello --follow 2>&1) || fail "the run did not succeed: $out"
echo "$out" | grep -q "hello from the package" || fail "the run's log lacks the output: $out"
if echo "$out" | grep -q "^uid 0$"; then fail "the command ran as uid 0: $out"; fi
kill -TERM "$DAEMON"
wait "$DAEMON" || true
DAEMON=""

echo "== a bad settings line is refused, naming it"
cp /etc/qinglong/ql-local.conf "$TMP/bad.conf"
echo "lisen = 127.0.0.1:1" >>"$TMP/bad.conf"
line=$(wc -l <"$TMP/bad.conf")
status=0
/usr/bin/ql-local serve --config "$TMP/bad.conf" >"$TMP/bad.log" 2>&1 || status=$?
[ "$status" -eq 2 ] || fail "a bad settings line exited $status, not 2"
grep -q "config_file_invalid: $TMP/bad.conf:$line: unknown setting 'lisen'" "$TMP/bad.log" || {
  cat "$TMP/bad.log"
  fail "the error does not name the line"
}

echo "== the other packaged settings files parse"
# Both name their required settings commented out: the first error is that one, not the file.
status=0
/usr/bin/ql-worker --config /etc/qinglong/ql-worker.conf >"$TMP/worker.log" 2>&1 || status=$?
[ "$status" -eq 2 ] && grep -q "invalid_arguments: --control is required" "$TMP/worker.log" || {
  cat "$TMP/worker.log"
  fail "ql-worker with the packaged ql-worker.conf"
}
status=0
/usr/bin/ql-cluster audit --config /etc/qinglong/ql-cluster.conf >"$TMP/cluster.log" 2>&1 ||
  status=$?
[ "$status" -eq 2 ] && grep -q "database_url_missing" "$TMP/cluster.log" || {
  cat "$TMP/cluster.log"
  fail "ql-cluster audit with the packaged ql-cluster.conf"
}

echo "== remove keeps the data, purge deletes it and says so"
dpkg -r qinglong-local >"$TMP/remove.log" 2>&1 || fail "dpkg -r"
[ ! -e /usr/lib/qinglong/ql-local ] || fail "ql-local still installed after remove"
[ -f /var/lib/qinglong/local/db/qinglong.db ] || fail "remove deleted the data"
[ -f /etc/qinglong/ql-local.conf ] || fail "remove deleted the settings"
grep -q "/var/lib/qinglong/local .* is kept" "$TMP/remove.log" || {
  cat "$TMP/remove.log"
  fail "remove does not say the data is kept"
}
dpkg --purge qinglong-local >"$TMP/purge.log" 2>&1 || fail "dpkg --purge"
[ ! -e /var/lib/qinglong/local ] || fail "purge kept /var/lib/qinglong/local"
[ ! -e /etc/qinglong/ql-local.conf ] || fail "purge kept the settings"
grep -q "deleting /var/lib/qinglong/local (database, run logs" "$TMP/purge.log" || {
  cat "$TMP/purge.log"
  fail "purge does not say what it deletes"
}
echo "package test passed"
