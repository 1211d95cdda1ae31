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
#   chromium                       Debian's, for TestConsentPageInChromium
#                                  (tests/browser), apt-get installed
#                                  when no chromium is on PATH
#
# The stamp in node_modules records which package.json and lockfile it was
# installed from, so a changed lockfile reinstalls. Set TEST_DEPS=skip to
# do nothing (the tests that need these then fail, they do not skip).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[[ ${TEST_DEPS:-} == skip ]] && exit 0

dir=e2e/oauth-client
stamp=$(cat "$dir/package.json" "$dir/package-lock.json" | sha256sum | cut -d' ' -f1)
if [[ $(cat "$dir/node_modules/.mcpruntime-stamp" 2>/dev/null) != "$stamp" ]] || ! "$dir/node_modules/.bin/node" --version >/dev/null 2>&1; then
  echo "test-deps: npm ci in $dir"
  command -v npm >/dev/null || { echo "test-deps: npm is needed" >&2; exit 1; }
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$stamp" >"$dir/node_modules/.mcpruntime-stamp"
fi

if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
  echo "test-deps: apt-get install chromium"
  sudo=
  [[ $(id -u) -ne 0 ]] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
fi
