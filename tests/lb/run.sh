#!/usr/bin/env bash
# The load-balancer tier: three `mcpvisor serve --http` replicas behind
# HAProxy (deploy/haproxy/haproxy.cfg), on loopback, through a steady load, a
# SIGKILL, a rolling restart, stateless requests and multi-round calls, the
# bridge's and a 2026-07-28 server's own (see lb_test.py).
#
#   tests/lb/run.sh [lb_test.py args...]     e.g. --phases rolling --keep
#
# Checks the deployment files first (deploy/validate.sh, which installs
# kubernetes-validate into .cache/deploy/venv when missing).
# Installs HAProxy with apt-get when it is missing (as root, or through sudo).
# Where that cannot be done the tier fails: it never passes by skipping.
# MCPVISOR_SKIP_LB=1 skips it on purpose (say, on a machine without apt).
# Uses $MCPVISOR_BIN if set, else target/debug/mcpvisor, and the fake worker
# next to it. Takes well under a minute once HAProxy is installed.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# Bounds a wedged run; a good one takes under a minute.
TIER_TIMEOUT="${LB_TIMEOUT:-300}"

if [[ "${MCPVISOR_SKIP_LB:-}" == 1 ]]; then
    echo "lb: skipped (MCPVISOR_SKIP_LB=1)" >&2
    exit 0
fi

if ! command -v haproxy >/dev/null 2>&1; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "lb: HAProxy is not installed and there is no apt-get to install it;" \
             "install haproxy, or set MCPVISOR_SKIP_LB=1 to skip this tier" >&2
        exit 1
    fi
    as_root=()
    if [[ "$(id -u)" != 0 ]]; then
        command -v sudo >/dev/null 2>&1 || {
            echo "lb: installing HAProxy needs root, and there is no sudo" >&2
            exit 1
        }
        as_root=(sudo -n)
    fi
    echo "lb: installing haproxy with apt-get" >&2
    "${as_root[@]}" apt-get update -qq
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends haproxy >&2
    command -v haproxy >/dev/null 2>&1 || { echo "lb: haproxy still missing after apt-get" >&2; exit 1; }
fi
haproxy -v | sed -n 1p >&2

# The deployment files (the HAProxy configs, the Kubernetes manifests)
# first: the test runs the shipped HAProxy config.
"$ROOT/deploy/validate.sh"

MCPVISOR_BIN="${MCPVISOR_BIN:-$ROOT/target/debug/mcpvisor}"
export MCPVISOR_BIN
exec timeout --kill-after=10 "$TIER_TIMEOUT" python3 "$HERE/lb_test.py" "$@"
