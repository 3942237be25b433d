# Sourced by the scripts that run the public Syncular repository's own
# TypeScript (the conformance catalog, the stock web client): puts bun on
# PATH (installed from npm into $work/bun when the machine has none) and
# copies the read-only checkout $repo to $work/repo, where
# `bun install --filter <package>` installs one workspace package.
#
#   ensure_bun WORK
#   reference_workspace WORK REPO PACKAGE
ensure_bun() {
  local work="$1"
  if ! command -v bun >/dev/null 2>&1; then
    if [ ! -x "$work/bun/node_modules/.bin/bun" ]; then
      mkdir -p "$work/bun"
      (cd "$work/bun" && npm install --no-audit --no-fund --silent bun@1.3 >/dev/null)
    fi
    PATH="$work/bun/node_modules/.bin:$PATH"
  fi
}

reference_workspace() {
  local work="$1" repo="$2" package="$3"
  ensure_bun "$work"
  mkdir -p "$work/repo"
  (cd "$repo" && tar --exclude=.git --exclude=node_modules -cf - .) | (cd "$work/repo" && tar xf -)
  (cd "$work/repo" && bun install --filter "$package" >/dev/null)
}
