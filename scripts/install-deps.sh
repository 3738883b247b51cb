#!/bin/sh
# Installs every build, run and test dependency from Debian 12 packages. Run as root (or with
# sudo available). Skips the package index refresh when everything is already installed.
set -eu

PACKAGES="build-essential cmake pkg-config ca-certificates tzdata procps curl \
  libabsl-dev nlohmann-json3-dev libcli11-dev libboost1.81-dev \
  libsqlite3-dev libmd-dev libpq-dev libsodium-dev libssl-dev libcurl4-openssl-dev openssl \
  node-qrcode-generator \
  libgtest-dev libgmock-dev libbenchmark-dev clang-14 libclang-rt-14-dev \
  postgresql-15 postgresql-client-15 \
  python3 python3-selenium python3-jsonschema python3-aiosmtpd chromium chromium-driver \
  fonts-wqy-microhei \
  jq git util-linux passwd \
  dpkg-dev adduser init-system-helpers systemd"

missing=""
for p in $PACKAGES; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing="$missing $p"
  fi
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
echo "installing:$missing"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing
