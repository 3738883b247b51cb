#!/bin/sh
# Builds the Debian packages into build/packages/ (deploy/debian/README.md):
#   qinglong-cli      ql, the command line (and its bash completion)
#   qinglong-local    ql-local, its modules, the qinglong-local service, /etc/qinglong/ql-local.conf
#   qinglong-cluster  ql-cluster, the qinglong-cluster service, /etc/qinglong/ql-cluster.conf
#   qinglong-worker   ql-worker, the qinglong-worker service, /etc/qinglong/ql-worker.conf
# Builds the executables in ./build first (scripts/build.sh's configuration) when they are out
# of date. Needs dpkg-dev (dpkg-shlibdeps), which scripts/install-deps.sh installs.
set -eu
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT="$ROOT/build/packages"
STAGE="$OUT/stage"

if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE="${QL_BUILD_TYPE:-RelWithDebInfo}" >/dev/null
fi
cmake --build build -j"${QL_JOBS:-2}" --target ql ql-local ql-cluster ql-worker ql-oidc ql-notify

VERSION=$(build/bin/ql-local --version | awk '{print $2}')
ARCH=$(dpkg --print-architecture)
rm -rf "$OUT"
mkdir -p "$STAGE"

# stage PACKAGE: an empty staging tree with the package's documentation.
stage() {
  dir="$STAGE/$1"
  mkdir -p "$dir/DEBIAN" "$dir/usr/share/doc/$1"
  install -m 0644 README.md "$dir/usr/share/doc/$1/README.md"
  install -m 0644 deploy/debian/README.md "$dir/usr/share/doc/$1/README.Debian.md"
  cat >"$dir/usr/share/doc/$1/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: qinglong
Comment: QingLong, the self-hosted cron task scheduler. Built from its source tree by
 scripts/package.sh; the libraries it uses are Debian's own packages (see Depends).
EOF
}

# executable PACKAGE FILE...: stripped executables in /usr/lib/qinglong, linked from /usr/bin.
# ql-local finds its modules beside its real path (/proc/self/exe), hence the one directory.
executable() {
  dir="$STAGE/$1"
  shift
  mkdir -p "$dir/usr/lib/qinglong" "$dir/usr/bin"
  for file in "$@"; do
    name=$(basename "$file")
    install -m 0755 --strip "$file" "$dir/usr/lib/qinglong/$name"
    ln -s "../lib/qinglong/$name" "$dir/usr/bin/$name"
  done
}

# module PACKAGE FILE...: stripped loadable modules beside the executables.
module() {
  dir="$STAGE/$1"
  shift
  mkdir -p "$dir/usr/lib/qinglong"
  for file in "$@"; do
    install -m 0644 --strip "$file" "$dir/usr/lib/qinglong/$(basename "$file")"
  done
}

# service PACKAGE UNIT CONF DATA WHAT ENABLE: the unit, the settings file (a conffile) and the
# maintainer scripts that create the system user and the data directory.
service() {
  pkg=$1 unit=$2 conf=$3 data=$4 what=$5 enable=$6
  dir="$STAGE/$pkg"
  install -D -m 0644 "deploy/debian/$unit" "$dir/lib/systemd/system/$unit"
  install -D -m 0644 "deploy/debian/$conf" "$dir/etc/qinglong/$conf"
  echo "/etc/qinglong/$conf" >"$dir/DEBIAN/conffiles"
  for script in postinst prerm postrm; do
    sed -e "s|@PACKAGE@|$pkg|g" -e "s|@UNIT@|$unit|g" -e "s|@CONF@|$conf|g" \
      -e "s|@DATA@|$data|g" -e "s|@WHAT@|$what|g" -e "s|@ENABLE@|$enable|g" \
      "deploy/debian/$script.in" >"$dir/DEBIAN/$script"
    chmod 0755 "$dir/DEBIAN/$script"
  done
}

# shlibs PACKAGE: the Depends line of the shared libraries its ELF files need.
shlibs() {
  dir="$STAGE/$1"
  work="$STAGE/.shlibs-$1"
  mkdir -p "$work/debian"
  printf 'Source: qinglong\n\nPackage: %s\nArchitecture: any\n' "$1" >"$work/debian/control"
  files=$(find "$dir/usr/lib/qinglong" -type f)
  # shellcheck disable=SC2086
  (cd "$work" && dpkg-shlibdeps -O $files 2>/dev/null) | sed -n 's/^shlibs:Depends=//p'
}

# control PACKAGE DESCRIPTION EXTRA-DEPENDS [RECOMMENDS]: DEBIAN/control, then the .deb.
control() {
  pkg=$1 description=$2 extra=$3 recommends=${4:-}
  dir="$STAGE/$pkg"
  depends=$(shlibs "$pkg")
  [ -n "$extra" ] && depends="$depends, $extra"
  size=$(du -sk --exclude=DEBIAN "$dir" | cut -f1)
  {
    echo "Package: $pkg"
    echo "Version: $VERSION"
    echo "Architecture: $ARCH"
    echo "Maintainer: QingLong developers <qinglong@localhost>"
    echo "Section: admin"
    echo "Priority: optional"
    echo "Installed-Size: $size"
    echo "Depends: $depends"
    [ -n "$recommends" ] && echo "Recommends: $recommends"
    echo "Description: $description"
  } >"$dir/DEBIAN/control"
  dpkg-deb --root-owner-group -Zxz --build "$dir" "$OUT/${pkg}_${VERSION}_${ARCH}.deb" >/dev/null
  echo "built $OUT/${pkg}_${VERSION}_${ARCH}.deb"
}

stage qinglong-cli
executable qinglong-cli build/bin/ql
mkdir -p "$STAGE/qinglong-cli/usr/share/bash-completion/completions"
build/bin/ql completion bash >"$STAGE/qinglong-cli/usr/share/bash-completion/completions/ql"
control qinglong-cli "QingLong command line (ql)
 ql talks to a QingLong daemon (ql-local) or control plane (ql-cluster) over its HTTP API:
 tasks, triggers, runs and their logs, secrets, projects and approvals." ""

stage qinglong-local
executable qinglong-local build/bin/ql-local
module qinglong-local build/bin/libql-notify.so build/bin/libql-oidc.so
service qinglong-local qinglong-local.service ql-local.conf /var/lib/qinglong/local \
  "database, run logs, owner token and secret key" yes
control qinglong-local "QingLong task scheduler for one machine (ql-local)
 Runs scheduled commands and scripts on time, exactly once, with a record and a log of each
 run, from an embedded SQLite database in /var/lib/qinglong/local. The qinglong-local service
 runs it as the system user qinglong, with commands confined in namespaces of their own." \
  "adduser, libssl3" "qinglong-cli"

stage qinglong-cluster
executable qinglong-cluster build/bin/ql-cluster
install -D -m 0644 deploy/postgres/roles.sql \
  "$STAGE/qinglong-cluster/usr/share/qinglong/postgres/roles.sql"
# A replica keeps its state in PostgreSQL: no data directory of its own.
service qinglong-cluster qinglong-cluster.service ql-cluster.conf "" "" no
control qinglong-cluster "QingLong control-plane replica on PostgreSQL (ql-cluster)
 Any number of replicas share one schedule in PostgreSQL through row leases, with no leader,
 and admit every cron occurrence exactly once; remote workers (qinglong-worker) run the
 commands. Also migrate, audit and credential commands." "adduser" "qinglong-cli"

stage qinglong-worker
executable qinglong-worker build/bin/ql-worker
service qinglong-worker qinglong-worker.service ql-worker.conf /var/lib/qinglong/worker \
  "attempt records and output not yet shipped" no
control qinglong-worker "QingLong worker (ql-worker)
 Runs commands leased from a QingLong control plane (qinglong-cluster), confined in namespaces
 of their own, and ships their output and results back." "adduser"

rm -rf "$STAGE"
