#!/usr/bin/env bash
# Installs the yjs npm package (the reference Yjs implementation) into
# .tools/yjs, once per machine, for the differential tests of the Go Yjs
# merger (internal/core/crdt/yjs). Only tests use it: production code never
# runs JavaScript. Idempotent and safe to run from parallel test processes:
# the install happens under an exclusive flock.
#
# Prints the directory holding node_modules/yjs on success (last line of
# stdout). Installs node and npm with apt-get when they are missing and we
# are root, as scripts/ci-deps.sh does.
set -euo pipefail
cd "$(dirname "$0")/.."

version=13.6.33
root="$PWD/.tools/yjs"
mkdir -p "$root"

exec 9>"$root/.lock"
flock 9

if [ -f "$root/.installed-$version" ] && [ -f "$root/node_modules/yjs/package.json" ] && command -v node >/dev/null 2>&1; then
  echo "$root"
  exit 0
fi

need=()
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "testenv-yjs: missing ${need[*]} and not root; install them first" >&2
    exit 1
  fi
  echo "testenv-yjs: installing ${need[*]} with apt-get" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
fi

echo "testenv-yjs: installing yjs@$version into $root" >&2
rm -f "$root"/.installed-*
npm install --no-save --no-audit --no-fund --loglevel=error \
  --prefix "$root" "yjs@$version" >&2

if [ ! -f "$root/node_modules/yjs/package.json" ]; then
  echo "testenv-yjs: yjs not found under $root after npm install" >&2
  exit 1
fi
touch "$root/.installed-$version"
echo "$root"
