"""Shared helpers for the interop tier: where things are, how a peer is launched
DIRECT or THROUGH mcpvisor, and /proc helpers to find and kill worker processes."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TextIO

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CACHE = ROOT / ".cache" / "interop"
NPM_MODULES = CACHE / "npm" / "node_modules" / "@modelcontextprotocol"
PY_SERVER = HERE / "fixtures" / "py_server.py"
EVERYTHING_JS = NPM_MODULES / "server-everything" / "dist" / "index.js"
FILESYSTEM_JS = NPM_MODULES / "server-filesystem" / "dist" / "index.js"

ROUTES = ("direct", "mcpvisor")

# JSON-RPC error code mcpvisor answers an in-flight request with when its worker dies.
WORKER_DIED = -32010
# mcpvisor's own codes: "the server stopped with the request in flight" and "the
# request was not started".
WORKER_LOST_CODES = (-32010,)
NOT_STARTED_CODES = (-32011,)


def node_bin() -> str:
    return os.environ.get("INTEROP_NODE", "node")


def mcpvisor_bin() -> Path:
    """The mcpvisor binary: $MCPVISOR_BIN, else target/debug/mcpvisor of this checkout."""
    env = os.environ.get("MCPVISOR_BIN")
    path = Path(env) if env else ROOT / "target" / "debug" / "mcpvisor"
    if not path.is_file() or not os.access(path, os.X_OK):
        raise FileNotFoundError(
            f"mcpvisor binary not found at {path}: run `cargo build -p mcpvisor` in the repository root "
            "or point MCPVISOR_BIN at a built binary"
        )
    return path


def run_mcpvisor(
    *args: str, timeout: float, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Runs `mcpvisor args` to its end, bounded by `timeout`, stdin closed, output captured as text."""
    return subprocess.run(
        [str(mcpvisor_bin()), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
    )


def mcpvisor_flags() -> list[str]:
    """Extra `mcpvisor run` flags from $INTEROP_MCPVISOR_FLAGS (shell-split), e.g. log options."""
    return shlex.split(os.environ.get("INTEROP_MCPVISOR_FLAGS", ""))


def server_params(
    route: str,
    command: str,
    args: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    flags: list[str] | None = None,
) -> StdioServerParameters:
    """Launch `command args` directly, or as `mcpvisor run [flags] -- command args`."""
    full_env = dict(env or {})
    if _current_tag:
        full_env[TAG_VAR] = _current_tag
    # The SDK passes only a minimal environment; keep what mcpvisor's logging may need.
    for key in ("RUST_LOG", "RUST_BACKTRACE", "MCPVISOR_LOG"):
        if key in os.environ:
            full_env.setdefault(key, os.environ[key])
    if route == "direct":
        return StdioServerParameters(command=command, args=args, env=full_env, cwd=cwd)
    if route == "mcpvisor":
        return StdioServerParameters(
            command=str(mcpvisor_bin()),
            args=["run", *mcpvisor_flags(), *(flags or []), "--", command, *args],
            env=full_env,
            cwd=cwd,
        )
    raise ValueError(f"unknown route {route!r}")


def serve_params(*configs: str | Path, flags: list[str] | None = None) -> StdioServerParameters:
    """`mcpvisor serve --config F ... [flags]`: every server of the config files as one."""
    env = {TAG_VAR: _current_tag} if _current_tag else {}
    for key in ("RUST_LOG", "RUST_BACKTRACE", "MCPVISOR_LOG"):
        if key in os.environ:
            env[key] = os.environ[key]
    # A list cache of the test's own, beside its first config, never the user's.
    env["MCPVISOR_CACHE_DIR"] = str(Path(configs[0]).parent / "mcpvisor-cache")
    # Pinned definitions (and tokens) of the test's own too: tests reuse
    # server names with other tools, which a shared pin store would hold back.
    env["XDG_STATE_HOME"] = str(Path(configs[0]).parent / "mcpvisor-state")
    args = ["serve", *(arg for config in configs for arg in ("--config", str(config))), *(flags or [])]
    return StdioServerParameters(command=str(mcpvisor_bin()), args=args, env=env)


def py_server_params(
    route: str, *, env: dict[str, str] | None = None, flags: list[str] | None = None
) -> StdioServerParameters:
    return server_params(route, sys.executable, ["-u", str(PY_SERVER)], env=env, flags=flags)


def everything_params(route: str) -> StdioServerParameters:
    return server_params(route, node_bin(), [str(EVERYTHING_JS), "stdio"])


def filesystem_params(route: str, *dirs: str) -> StdioServerParameters:
    return server_params(route, node_bin(), [str(FILESYSTEM_JS), *dirs])


@contextlib.asynccontextmanager
async def connect(params: StdioServerParameters, errlog: TextIO, **client_kwargs: Any) -> AsyncIterator[Client]:
    """A connected `mcp.Client` whose peer's stderr goes to `errlog`."""
    client_kwargs.setdefault("cache", None)  # every list call must reach the wire
    async with Client(stdio_client(params, errlog=errlog), **client_kwargs) as client:
        yield client


# ---------------------------------------------------------------- processes


def _stat(pid: int) -> tuple[str, int] | None:
    """(comm, ppid) of a process, or None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm may contain spaces and parentheses: split at the last ')'.
    comm = raw[raw.index("(") + 1 : raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2 :].split()
    state, ppid = fields[0], int(fields[1])
    if state in ("Z", "X"):
        return None
    return comm, ppid


def children_of(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        st = _stat(int(entry))
        if st is not None and st[1] == pid:
            kids.append(int(entry))
    return sorted(kids)


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


# Every process a test launches (mcpvisor, servers, and their children) inherits
# this variable, so the test can find all of them later, orphans included.
TAG_VAR = "MCPVISOR_INTEROP_TAG"
_current_tag = ""


def set_process_tag(tag: str) -> None:
    global _current_tag
    _current_tag = tag


def process_tag() -> str:
    """The current test's process tag (empty outside a test)."""
    return _current_tag


def tagged_processes(tag: str) -> set[int]:
    """Live processes whose environment carries TAG_VAR=tag."""
    needle = f"{TAG_VAR}={tag}".encode()
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if needle in environ.split(b"\0") and alive(int(entry)):
            found.add(int(entry))
    return found


def alive(pid: int) -> bool:
    return _stat(pid) is not None


def peer_process() -> int:
    """The pid of the process the SDK client spawned (this test process's only live child)."""
    kids = children_of(os.getpid())
    if len(kids) != 1:
        raise AssertionError(
            f"expected exactly one child of the test process, found {kids}: {[cmdline(k) for k in kids]}"
        )
    return kids[0]


def server_process(route: str, marker: str) -> int:
    """The pid of the real MCP server: the client's child directly, or mcpvisor's child
    (or deeper descendant) whose command line contains `marker` (the first found)."""
    top = peer_process()
    if route == "direct":
        return top
    return server_processes(marker)[0]


def server_processes(marker: str) -> list[int]:
    """Every descendant of mcpvisor whose command line contains `marker`: a server of
    both eras runs twice under "auto" once clients of both eras use it."""
    top = peer_process()
    todo, seen, found = list(children_of(top)), [], []
    while todo:
        pid = todo.pop(0)
        seen.append(pid)
        if any(marker in part for part in cmdline(pid)):
            found.append(pid)
        todo.extend(children_of(pid))
    if not found:
        raise AssertionError(f"no descendant of mcpvisor ({top}) runs {marker!r}: {[cmdline(p) for p in seen]}")
    return found


async def wait_dead(pid: int, timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        while alive(pid):
            await anyio.sleep(0.02)


def sigkill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


async def eventually(predicate, timeout: float, interval: float = 0.02) -> None:
    """Poll `predicate()` (sync or async) until true; TimeoutError after `timeout` seconds."""
    with anyio.fail_after(timeout):
        while True:
            value = predicate()
            if hasattr(value, "__await__"):
                value = await value
            if value:
                return
            await anyio.sleep(interval)


LIST_CAPABILITIES = ("tools", "prompts", "resources")


def normalised_capabilities(capabilities: dict) -> dict:
    """Server capabilities as JSON, with `listChanged: true` on every declared list.

    mcpvisor advertises `listChanged: true` for every list the server declares (so
    clients re-read lists after a hot reload); this is what to compare with DIRECT."""
    out = dict(capabilities)
    for name in LIST_CAPABILITIES:
        if isinstance(out.get(name), dict):
            out[name] = {**out[name], "listChanged": True}
    return out


def assert_lists_advertised(capabilities: dict) -> None:
    for name in LIST_CAPABILITIES:
        if isinstance(capabilities.get(name), dict):
            assert capabilities[name].get("listChanged") is True, (name, capabilities)
