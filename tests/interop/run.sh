#!/usr/bin/env bash
# Runs the interop tier: real MCP peers (Python SDK, npm reference servers),
# each scenario DIRECT and THROUGH mcpvisor.
#
#   tests/interop/run.sh [pytest args...]      e.g. -k everything, -x, -rA
#
# Uses $MCPVISOR_BIN if set, else target/debug/mcpvisor (build it first with
# `cargo build -p mcpvisor`). Extra `mcpvisor run` flags: $INTEROP_MCPVISOR_FLAGS.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"

bash "$HERE/setup.sh"

BIN="${MCPVISOR_BIN:-$ROOT/target/debug/mcpvisor}"
if [[ ! -x "$BIN" || -d "$BIN" ]]; then
    echo "interop: mcpvisor binary not found at $BIN" >&2
    echo "interop: build it with \`cargo build -p mcpvisor\` in $ROOT, or set MCPVISOR_BIN" >&2
    exit 2
fi
export MCPVISOR_BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"

cd "$HERE"
exec "$ROOT/.cache/interop/venv/bin/python" -m pytest -q "$@"
