#!/usr/bin/env bash
# What `make test` needs besides Go, installed from the project's own
# files when missing (CI starts from a clean machine):
#
#   e2e/oauth-client/node_modules  the official MCP TypeScript SDK clients, v1
#                                  (@modelcontextprotocol/sdk) and v2
#                                  (@modelcontextprotocol/client), and Node 22,
#                                  from e2e/oauth-client/package-lock.json (npm ci),
#                                  for TestTypeScriptSDKOAuth and
#                                  TestModernClientsOnTheBinary (cmd/runtime),
#                                  TestTypeScriptSDKFeatures and
#                                  TestModernClientsOnEverything (examples/everything)
#   e2e/agents/node_modules        the agent CLIs the provider drivers are
#                                  tested with, pinned: Codex (@openai/codex),
#                                  Claude Code (@anthropic-ai/claude-code) and
#                                  OpenCode (opencode-ai), from
#                                  e2e/agents/package-lock.json (npm ci), for the
#                                  tests of actors/provider/{codex,claude,opencode}
#                                  and actors/provider/agenttest (agenttest.Binary
#                                  finds them in node_modules/.bin)
#   chromium                       Debian's, for TestConsentPageInChromium
#                                  (tests/browser), apt-get installed
#                                  when no chromium is on PATH
#
# The stamp in each node_modules records which package.json and lockfile it was
# installed from, so a changed lockfile reinstalls. Set TEST_DEPS=skip to
# do nothing (the tests that need these then fail, they do not skip).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[[ ${TEST_DEPS:-} == skip ]] && exit 0

# A throwaway HOME for the --version checks: a CLI may write its config there.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# npm_ci DIR BIN...: npm ci in DIR unless its node_modules carries the stamp
# of its package.json and lockfile and every node_modules/.bin/BIN answers
# --version (an interrupted install leaves a stamp-less or broken tree).
npm_ci() {
  local dir=$1 stamp bin fresh=yes
  shift
  stamp=$(cat "$dir/package.json" "$dir/package-lock.json" | sha256sum | cut -d' ' -f1)
  [[ $(cat "$dir/node_modules/.mcpruntime-stamp" 2>/dev/null) == "$stamp" ]] || fresh=
  for bin in "$@"; do
    [[ -n $fresh ]] && ! HOME=$scratch "$dir/node_modules/.bin/$bin" --version >/dev/null 2>&1 && fresh=
  done
  [[ -n $fresh ]] && return 0
  echo "test-deps: npm ci in $dir"
  command -v npm >/dev/null || { echo "test-deps: npm is needed" >&2; exit 1; }
  rm -f "$dir/node_modules/.mcpruntime-stamp"
  if ! (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error); then
    # npm ci refuses a lockfile that lacks an entry package.json implies
    # (e2e/agents's lacks OpenCode's binaries for other platforms); install
    # the same pinned versions without rewriting it.
    echo "test-deps: npm ci failed in $dir; npm install --no-save of the same pinned versions" >&2
    (cd "$dir" && npm install --no-save --no-audit --no-fund --loglevel=error)
  fi
  echo "$stamp" >"$dir/node_modules/.mcpruntime-stamp"
}

npm_ci e2e/oauth-client node
npm_ci e2e/agents codex claude opencode

if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
  echo "test-deps: apt-get install chromium"
  sudo=
  [[ $(id -u) -ne 0 ]] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
fi
