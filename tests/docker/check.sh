#!/usr/bin/env bash
# Checks the Dockerfile without a container engine: lints it with the npm
# package dockerfile-utils (installed under .cache/docker when missing) and
# checks that what it builds and copies is what the workspace has. Where a
# container engine runs (`docker info` or `podman info` succeeds), it also
# builds the image and prints its size.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="$ROOT/.cache/docker"
LINTER_VERSION="0.16.3"
LINTER="$CACHE/node_modules/.bin/dockerfile-utils"
DOCKERFILE="$ROOT/Dockerfile"

if [[ ! -x "$LINTER" || "$(cat "$CACHE/.stamp" 2>/dev/null)" != "$LINTER_VERSION" ]]; then
    echo "docker check: installing dockerfile-utils@$LINTER_VERSION into $CACHE" >&2
    mkdir -p "$CACHE"
    timeout 300 npm install --prefix "$CACHE" --no-audit --no-fund --silent "dockerfile-utils@$LINTER_VERSION"
    echo "$LINTER_VERSION" > "$CACHE/.stamp"
fi

echo "docker check: lint" >&2
# Any warning (a deprecated instruction, an unknown flag) fails too.
report="$(timeout 60 "$LINTER" lint "$DOCKERFILE" || true)"
if [[ -n "$report" ]]; then
    echo "$report" >&2
    echo "docker check: the Dockerfile has problems (above)" >&2
    exit 1
fi

echo "docker check: what it builds and copies" >&2
fail() { echo "docker check: $*" >&2; exit 1; }
grep -q -- '--locked --bin mcpvisor' "$DOCKERFILE" || fail "the build does not build the mcpvisor binary with --locked"
grep -q '^name = "mcpvisor"$' "$ROOT/crates/cli/Cargo.toml" || fail "crates/cli is not the mcpvisor package"
grep -q '^COPY --from=build /src/target/release/mcpvisor /usr/local/bin/mcpvisor$' "$DOCKERFILE" \
    || fail "the final stage does not copy the built binary"
grep -q '^USER 10001:10001$' "$DOCKERFILE" || fail "the image does not run as an unprivileged user"
# Everything the build needs is in the context: .dockerignore keeps out
# only build output and caches.
while read -r pattern; do
    case "$pattern" in
        ''|'#'*) ;;
        target|target/|.cache|.cache/|.git|.git/|*.md|node_modules|node_modules/|.dockerignore|Dockerfile|deploy|deploy/|docs|docs/|tests|tests/) ;;
        *) fail ".dockerignore leaves out $pattern, which the build may need" ;;
    esac
done < "$ROOT/.dockerignore"

for engine in docker podman; do
    if command -v "$engine" >/dev/null 2>&1 && timeout 20 "$engine" info >/dev/null 2>&1; then
        echo "docker check: building the image with $engine" >&2
        timeout 1800 "$engine" build -t mcpvisor:check "$ROOT"
        "$engine" image inspect mcpvisor:check --format 'docker check: image size {{.Size}} bytes' >&2
        exit 0
    fi
done
echo "docker check: no container engine runs here; the image was not built" >&2
