#!/usr/bin/env bash
# Checks the deployment files without running them:
#   - the Kubernetes manifests against the Kubernetes schemas
#     (kubernetes-validate, installed into .cache/deploy/venv when missing);
#   - both HAProxy configurations with `haproxy -c` (HAProxy must be
#     installed: tests/lb/run.sh installs it);
#   - that the in-cluster configuration routes like the shipped one (the
#     same stickiness, retry, check and multi-round routing lines), and that
#     each of its servers has its use-server line and its pod.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.cache/deploy/venv"
PINS="kubernetes-validate==1.37.0"
# The newest Kubernetes release whose schemas that version carries.
K8S_VERSION="${K8S_VERSION:-1.37}"

stamp="$VENV/.deploy-stamp"
want="$(printf '%s %s' "$(python3 -V 2>&1)" "$PINS" | sha256sum | cut -d' ' -f1)"
if [[ ! -x "$VENV/bin/kubernetes-validate" || ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    echo "deploy: installing $PINS into $VENV" >&2
    python3 -m venv --clear "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$PINS"
    printf '%s' "$want" >"$stamp"
fi

echo "deploy: Kubernetes manifests (schemas of $K8S_VERSION, strict)" >&2
"$VENV/bin/kubernetes-validate" --strict --kubernetes-version "$K8S_VERSION" \
    "$ROOT"/deploy/kubernetes/*.yaml

command -v haproxy >/dev/null 2>&1 || { echo "deploy: haproxy is not installed" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "deploy: deploy/haproxy/haproxy.cfg" >&2
MCPVISOR_LB_BIND=127.0.0.1:8808 MCPVISOR_REPLICA_1=10.0.0.11:8808 \
MCPVISOR_REPLICA_2=10.0.0.12:8808 MCPVISOR_REPLICA_3=10.0.0.13:8808 \
    haproxy -c -q -f "$ROOT/deploy/haproxy/haproxy.cfg"

echo "deploy: the HAProxy configuration in deploy/kubernetes/haproxy.yaml" >&2
"$VENV/bin/python" - "$ROOT/deploy/kubernetes/haproxy.yaml" "$tmp/cluster.cfg" <<'PY'
import sys
import yaml

docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
maps = [d for d in docs if d["kind"] == "ConfigMap" and "haproxy.cfg" in d.get("data", {})]
if len(maps) != 1:
    sys.exit(f"expected one ConfigMap with haproxy.cfg, found {len(maps)}")
open(sys.argv[2], "w").write(maps[0]["data"]["haproxy.cfg"])
PY
haproxy -c -q -f "$tmp/cluster.cfg"

# The lines that decide where a request goes must be the same in both.
routing() {
    grep -E '^\s*(balance|stick|stick-table|option (http-buffer-request|redispatch|httpchk)|retries|retry-on|http-check|default-server|timeout|http-request)\b' "$1" | grep -vE 'timeout (resolve|retry)' \
        | sed -E 's/^\s+//; s/\s+/ /g'
}
if ! diff <(routing "$ROOT/deploy/haproxy/haproxy.cfg") <(routing "$tmp/cluster.cfg") >&2; then
    echo "deploy: the two HAProxy configurations route differently (above)" >&2
    exit 1
fi
# Every server of the in-cluster one is routed to by its name, and named
# after a pod the StatefulSet can make.
servers="$(grep -E '^\s*server ' "$tmp/cluster.cfg" | awk '{print $2}' | sort)"
routed="$(grep -E '^\s*use-server ' "$tmp/cluster.cfg" | awk '{print $2}' | sort)"
if [[ -z "$servers" || "$servers" != "$routed" ]]; then
    echo "deploy: the in-cluster servers and their use-server lines differ" >&2
    exit 1
fi
while read -r server; do
    grep -qE "^\s*use-server $server if \{ var\(txn.replica\) -m str $server \}" "$tmp/cluster.cfg" \
        || { echo "deploy: $server is not routed by its own name" >&2; exit 1; }
    grep -qE "^\s*server $server $server\.mcpvisor-replicas\." "$tmp/cluster.cfg" \
        || { echo "deploy: $server is not its pod's DNS name" >&2; exit 1; }
done <<<"$servers"
grep -q -- '- \$(POD_NAME)' "$ROOT/deploy/kubernetes/mcpvisor.yaml" \
    || { echo "deploy: the pods do not run with --replica-id set to their names" >&2; exit 1; }
echo "deploy: all valid" >&2
