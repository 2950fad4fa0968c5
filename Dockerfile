# mcpvisor in a container: `mcpvisor serve --http` behind a load balancer
# (see docs/scaling.md and deploy/).
#
#   docker build -t mcpvisor .
#
# The final image has mcpvisor only: the stdio servers your config starts
# (node, python, ...) must be added to it, e.g. in an image built FROM this
# one. It runs as an unprivileged user, with its list cache under /tmp.

FROM rust:1-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin mcpvisor \
    && strip target/release/mcpvisor

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates tini \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 mcpvisor \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/mcpvisor --create-home mcpvisor
COPY --from=build /src/target/release/mcpvisor /usr/local/bin/mcpvisor
USER 10001:10001
ENV MCPVISOR_CACHE_DIR=/tmp/mcpvisor-cache
EXPOSE 8808
# tini reaps the servers' orphans and passes SIGTERM on: the drain starts.
# `--allow-host *` leaves the token as the guard; list the names your
# clients use with --allow-host instead to keep the Host check.
ENTRYPOINT ["/usr/bin/tini", "--", "mcpvisor"]
CMD ["serve", "--config", "/etc/mcpvisor/mcp.json", "--no-watch", \
     "--http", "0.0.0.0:8808", "--auth-token-file", "/etc/mcpvisor/token/token", \
     "--allow-host", "*", "--http-drain", "20s", "--http-drain-min", "3s"]
