#!/usr/bin/env bash
# Idempotent installer for the interop test tier.
#   - Python venv at .cache/interop/venv with the pinned requirements below
#   - npm prefix at .cache/interop/npm with the pinned reference servers
# Each part is (re)installed only when its stamp file does not match the pins,
# so a rerun takes well under a second.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="$ROOT/.cache/interop"
VENV="$CACHE/venv"
NPM_PREFIX="$CACHE/npm"

PY_REQUIREMENTS="mcp==2.3.0
pytest==8.4.2"
NPM_PACKAGES="@modelcontextprotocol/server-everything@2026.8.31
@modelcontextprotocol/server-filesystem@2026.8.31
@modelcontextprotocol/sdk@1.32.2"

PYTHON="${INTEROP_PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
    for cand in python3.11 python3; do
        if command -v "$cand" >/dev/null 2>&1; then PYTHON="$cand"; break; fi
    done
fi
[[ -n "$PYTHON" ]] || { echo "interop setup: no python3 found" >&2; exit 1; }
command -v npm >/dev/null 2>&1 || { echo "interop setup: npm not found" >&2; exit 1; }

hash_of() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }

mkdir -p "$CACHE"

# ---- Python venv -----------------------------------------------------------
py_stamp="$VENV/.interop-stamp"
py_want="$(hash_of "$("$PYTHON" -V 2>&1) $PY_REQUIREMENTS")"
if [[ ! -x "$VENV/bin/python" || ! -f "$py_stamp" || "$(cat "$py_stamp")" != "$py_want" ]]; then
    echo "interop setup: installing Python requirements into $VENV" >&2
    # A fresh venv whenever the pins or the interpreter change: no stale packages.
    "$PYTHON" -m venv --clear "$VENV"
    req_file="$(mktemp)"
    printf '%s\n' "$PY_REQUIREMENTS" >"$req_file"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req_file"
    rm -f "$req_file"
    printf '%s' "$py_want" >"$py_stamp"
fi

# ---- npm prefix ------------------------------------------------------------
npm_stamp="$NPM_PREFIX/.interop-stamp"
npm_want="$(hash_of "$NPM_PACKAGES")"
npm_present=1
for pkg in $NPM_PACKAGES; do
    name="${pkg%@*}"
    [[ -f "$NPM_PREFIX/node_modules/$name/package.json" ]] || npm_present=0
done
if [[ "$npm_present" != 1 || ! -f "$npm_stamp" || "$(cat "$npm_stamp")" != "$npm_want" ]]; then
    echo "interop setup: installing npm packages into $NPM_PREFIX" >&2
    mkdir -p "$NPM_PREFIX"
    # shellcheck disable=SC2086
    npm install --prefix "$NPM_PREFIX" --no-audit --no-fund --save-exact --loglevel=error \
        $(printf '%s ' $NPM_PACKAGES)
    printf '%s' "$npm_want" >"$npm_stamp"
fi

# ---- the sandbox scenarios -------------------------------------------------
# uv (for uvx) in a venv of its own, and the last server-filesystem release
# whose own check let a symbolic link lead out of its directories (2025.3.28:
# a prefix comparison of the link's target), so the sandbox can be shown to
# hold where the server's check does not.
SANDBOX_CACHE="$CACHE/sandbox"
UV_REQUIREMENT="uv==0.13.8"
uv_stamp="$SANDBOX_CACHE/uv/.interop-stamp"
uv_want="$(hash_of "$("$PYTHON" -V 2>&1) $UV_REQUIREMENT")"
if [[ ! -x "$SANDBOX_CACHE/uv/bin/uvx" || ! -f "$uv_stamp" || "$(cat "$uv_stamp")" != "$uv_want" ]]; then
    echo "interop setup: installing $UV_REQUIREMENT into $SANDBOX_CACHE/uv" >&2
    "$PYTHON" -m venv --clear "$SANDBOX_CACHE/uv"
    "$SANDBOX_CACHE/uv/bin/python" -m pip install --quiet --disable-pip-version-check "$UV_REQUIREMENT"
    printf '%s' "$uv_want" >"$uv_stamp"
fi
# shellcheck source=../lib/npm.sh
. "$ROOT/tests/lib/npm.sh"
ensure_npm_packages "interop setup" "$SANDBOX_CACHE/npm" \
    "@modelcontextprotocol/server-filesystem@2025.3.28" \
    "@modelcontextprotocol/server-filesystem/dist/index.js"
