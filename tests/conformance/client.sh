#!/usr/bin/env bash
# The client the conformance suite's client scenarios drive: mcpvisor's
# runner against the scenario's server (its URL is the last argument; the
# scenario is in $MCP_CONFORMANCE_SCENARIO). Uses $MCPVISOR_BIN.
set -euo pipefail
url="${*: -1}"
case "${MCP_CONFORMANCE_SCENARIO:-}" in
    initialize | request-metadata) exec "$MCPVISOR_BIN" inspect --timeout 20s --url "$url" ;;
    tools_call) exec "$MCPVISOR_BIN" call --timeout 20s --url "$url" add_numbers '{"a":2,"b":3}' ;;
    *) echo "client.sh: no client for scenario ${MCP_CONFORMANCE_SCENARIO:-?}" >&2; exit 2 ;;
esac
