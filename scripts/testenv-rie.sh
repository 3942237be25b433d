#!/usr/bin/env bash
# Installs the AWS Lambda Runtime Interface Emulator into .tools/bin from the
# Go module proxy (the only place it can come from here), once per machine.
# Idempotent and safe to run from parallel test processes: the install
# happens under an exclusive flock, and a version stamp makes a changed pin
# reinstall. Prints the binary's path (last line of stdout) on success.
set -euo pipefail
cd "$(dirname "$0")/.."

version=v0.0.0-20261030222936-bef5c4ba774d
bin="$PWD/.tools/bin"
exe="$bin/aws-lambda-rie"
stamp="$bin/.aws-lambda-rie.version"
mkdir -p "$bin"

exec 9>"$bin/.aws-lambda-rie.lock"
flock 9

if [ -x "$exe" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ]; then
  echo "$exe"
  exit 0
fi

echo "testenv-rie: installing aws-lambda-rie@$version into $bin" >&2
rm -f "$stamp"
GOBIN="$bin" go install \
  "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@$version" >&2
echo "$version" >"$stamp"
echo "$exe"
