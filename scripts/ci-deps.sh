#!/usr/bin/env bash
# Installs what the test suite needs on a fresh machine: Java 17, npm and
# node (for DynamoDB Local and the Yjs differential tests) from Debian when
# missing. Idempotent.
set -euo pipefail
need=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v node >/dev/null 2>&1 || need+=(nodejs)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
