#!/bin/sh
# Installs the test OpenID Connect provider (tests/oidc): Debian 12's nodejs and npm when node
# or npm is missing, then the npm packages pinned by tests/oidc/package-lock.json. Run as root
# (or with sudo available). Quick when everything is already in place: skips apt when node and
# npm exist (a node from elsewhere, with its own npm, is kept) and npm when the installed tree
# matches the lock file.
set -eu
cd "$(dirname "$0")/.."

missing=""
command -v node >/dev/null 2>&1 || missing="nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
if [ -n "$missing" ]; then
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  echo "installing:$missing"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -q --no-install-recommends $missing
fi

major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 18 ]; then
  echo "install-oidc-provider.sh: node $(node --version) is too old; tests/oidc needs 18 or later" >&2
  exit 1
fi

dir=tests/oidc
stamp="$dir/node_modules/.installed-lock.sha256"
want=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -d "$dir/node_modules/oidc-provider" ]; then
  exit 0
fi
echo "installing $dir (npm ci, node $(node --version), npm $(npm --version))"
npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
echo "$want" > "$stamp"
