#!/usr/bin/env bash
# Idempotent installer of the HTTP bridges `mcpvisor-bench peers` measures
# against mcpvisor:
#   - supergateway (npm) under .cache/bench-peers/npm
#   - mcp-proxy (PyPI) in the venv .cache/bench-peers/venv
# Each part is (re)installed only when its stamp does not match the pins.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache/bench-peers"
VENV="$CACHE/venv"
NPM_PREFIX="$CACHE/npm"

PY_REQUIREMENTS="mcp-proxy==0.13.0"
NPM_PACKAGES="supergateway@4.0.0"

PYTHON="${BENCH_PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
    for cand in python3.11 python3; do
        if command -v "$cand" >/dev/null 2>&1; then PYTHON="$cand"; break; fi
    done
fi
[[ -n "$PYTHON" ]] || { echo "bench peers setup: no python3 found" >&2; exit 1; }
command -v npm >/dev/null 2>&1 || { echo "bench peers setup: npm not found" >&2; exit 1; }

hash_of() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
mkdir -p "$CACHE"

py_stamp="$VENV/.bench-stamp"
py_want="$(hash_of "$("$PYTHON" -V 2>&1) $PY_REQUIREMENTS")"
if [[ ! -x "$VENV/bin/mcp-proxy" || ! -f "$py_stamp" || "$(cat "$py_stamp")" != "$py_want" ]]; then
    echo "bench peers setup: installing $PY_REQUIREMENTS into $VENV" >&2
    "$PYTHON" -m venv --clear "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check $PY_REQUIREMENTS
    printf '%s' "$py_want" >"$py_stamp"
fi

npm_stamp="$NPM_PREFIX/.bench-stamp"
npm_want="$(hash_of "$NPM_PACKAGES")"
if [[ ! -f "$NPM_PREFIX/node_modules/supergateway/package.json" || ! -f "$npm_stamp" || "$(cat "$npm_stamp")" != "$npm_want" ]]; then
    echo "bench peers setup: installing $NPM_PACKAGES into $NPM_PREFIX" >&2
    mkdir -p "$NPM_PREFIX"
    npm install --prefix "$NPM_PREFIX" --no-audit --no-fund --save-exact --loglevel=error $NPM_PACKAGES
    printf '%s' "$npm_want" >"$npm_stamp"
fi
