"""An entry's `sandbox` against real servers: npm's server-filesystem kept in
its directory where its own check lets a symbolic link out, a Python SDK
server's connections under `"network"`, and `npx`, `uvx` and Python SDK
servers starting and answering inside a sandbox (through `inspect`, `call`
and `serve`). Each scenario is shown without the sandbox first, so a
refusal is the sandbox's and not the scenario's."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from interop_util import CACHE, FILESYSTEM_JS, HERE, connect, node_bin, run_mcpvisor, serve_params

TIMEOUT = 120
NET_SERVER = HERE / "fixtures" / "net_server.py"
PY_SERVER = HERE / "fixtures" / "py_server.py"
# The last release whose own check follows a link out of its directories
# (installed by setup.sh).
OLD_FILESYSTEM_JS = (
    CACHE / "sandbox" / "npm" / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
)
UV_BIN = CACHE / "sandbox" / "uv" / "bin"


def mcpvisor(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_mcpvisor(*args, timeout=TIMEOUT, env=env, cwd=cwd)


def config(path: Path, servers: dict[str, dict]) -> str:
    path.write_text(json.dumps({"mcpServers": servers}))
    return str(path)


def call(cfg: str, name: str, tool: str, args: dict) -> subprocess.CompletedProcess[str]:
    return mcpvisor("call", "--config", cfg, name, tool, json.dumps(args))


def python_entry(script: Path, sandbox: dict | None) -> dict:
    """The interop venv's Python running `script`: the sandbox reads the
    script's directory; the venv is the program's own installation."""
    entry = {"command": sys.executable, "args": ["-u", str(script)]}
    if sandbox is not None:
        entry["sandbox"] = {"read": [str(script.parent)], **sandbox}
    return entry


# ---------------------------------------------------------------- files


def test_filesystem_server_cannot_follow_a_symlink_out_of_its_sandbox(tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    # A sibling whose name starts with the allowed one's: server-filesystem
    # 2025.3.28 compares the link's target by prefix and lets it through.
    outside = tmp_path / "allowed_private"
    allowed.mkdir()
    outside.mkdir()
    (allowed / "note.txt").write_text("a note\n")
    (outside / "secret.txt").write_text("the secret\n")
    (allowed / "link.txt").symlink_to(outside / "secret.txt")
    server = {"command": node_bin(), "args": [str(OLD_FILESYSTEM_JS), str(allowed)]}
    sandboxed = {**server, "sandbox": {"read": [str(allowed), str(OLD_FILESYSTEM_JS.parents[3])]}}
    cfg = config(tmp_path / "fs.json", {"plain": server, "boxed": sandboxed})

    # Alone, the server follows the link it believes is inside.
    out = call(cfg, "plain", "read_file", {"path": str(allowed / "link.txt")})
    assert out.returncode == 0, out.stderr
    assert "the secret" in out.stdout

    # In its sandbox, it still reads its own directory...
    out = call(cfg, "boxed", "read_file", {"path": str(allowed / "note.txt")})
    assert out.returncode == 0, out.stderr
    assert "a note" in out.stdout
    # ...but the kernel refuses the link's target, and the file itself.
    for path in (allowed / "link.txt", outside / "secret.txt"):
        out = call(cfg, "boxed", "read_file", {"path": str(path)})
        said = out.stdout + out.stderr
        assert out.returncode == 1, said
        assert "the secret" not in said
        assert "EACCES: permission denied" in said, said


def test_current_filesystem_server_under_npx_answers_inside_a_sandbox(tmp_path: Path) -> None:
    (tmp_path / "note.txt").write_text("through npx\n")
    package = "@modelcontextprotocol/server-filesystem@" + FILESYSTEM_JS.parents[1].joinpath("package.json").read_text().split('"version": "')[1].split('"')[0]
    cfg = config(
        tmp_path / "npx.json",
        {"fs": {"command": "npx", "args": ["-y", package, str(tmp_path)], "cwd": str(tmp_path), "sandbox": {"read": [str(tmp_path)]}}},
    )
    listing = mcpvisor("inspect", "--json", "--config", cfg, "fs")
    assert listing.returncode == 0, listing.stderr
    names = [t["name"] for t in json.loads(listing.stdout)["tools"]]
    assert "read_text_file" in names, names
    out = call(cfg, "fs", "read_text_file", {"path": str(tmp_path / "note.txt")})
    assert out.returncode == 0, out.stderr
    assert "through npx" in out.stdout


# ---------------------------------------------------------------- network


@pytest.fixture
def listeners() -> Iterator[tuple[int, int]]:
    """Two ports listening on 127.0.0.1."""
    socks = []
    for _ in range(2):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        socks.append(sock)
    try:
        yield socks[0].getsockname()[1], socks[1].getsockname()[1]
    finally:
        for sock in socks:
            sock.close()


def test_network_none_and_a_port_list(tmp_path: Path, listeners: tuple[int, int]) -> None:
    port, other = listeners
    cfg = config(
        tmp_path / "net.json",
        {
            "plain": python_entry(NET_SERVER, None),
            "none": python_entry(NET_SERVER, {"network": "none"}),
            "ports": python_entry(NET_SERVER, {"network": [f"127.0.0.1:{port}"]}),
        },
    )
    # Without a sandbox the server connects to both.
    for target in (port, other):
        out = call(cfg, "plain", "connect", {"port": target})
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "connected", out.stdout
    # "none": nothing, loopback included.
    out = call(cfg, "none", "connect", {"port": port})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("refused:") and "unreachable" in out.stdout, out.stdout
    # A port list: exactly its ports.
    out = call(cfg, "ports", "connect", {"port": port})
    assert out.stdout.strip() == "connected", (out.stdout, out.stderr)
    out = call(cfg, "ports", "connect", {"port": other})
    assert out.stdout.startswith("refused:") and "Permission denied" in out.stdout, out.stdout


# ---------------------------------------------------------------- servers that start inside


def test_python_sdk_server_lists_and_reads_only_what_it_may(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the server\n")
    cfg = config(tmp_path / "py.json", {"py": python_entry(NET_SERVER, {"network": "none"})})
    listing = mcpvisor("inspect", "--json", "--config", cfg, "py")
    assert listing.returncode == 0, listing.stderr
    assert [t["name"] for t in json.loads(listing.stdout)["tools"]] == ["connect", "read"]
    out = call(cfg, "py", "read", {"path": str(secret)})
    assert out.stdout.startswith("refused:") and "Permission denied" in out.stdout, out.stdout
    out = call(cfg, "py", "read", {"path": str(NET_SERVER)})
    assert "interop-net-server" in out.stdout


def test_uvx_server_answers_inside_a_sandbox(tmp_path: Path) -> None:
    env = {"PATH": f"{UV_BIN}:/usr/bin:/bin", "HOME": str(Path.home())}
    cfg = config(
        tmp_path / "uvx.json",
        {
            "time": {
                "command": str(UV_BIN / "uvx"),
                "args": ["--from", "mcp-server-time==2026.10.19", "mcp-server-time", "--local-timezone", "UTC"],
                "env": env,
                "sandbox": {},
            }
        },
    )
    listing = mcpvisor("inspect", "--json", "--config", cfg, "time")
    assert listing.returncode == 0, listing.stderr
    names = [t["name"] for t in json.loads(listing.stdout)["tools"]]
    assert "get_current_time" in names, names
    out = call(cfg, "time", "get_current_time", {"timezone": "UTC"})
    assert out.returncode == 0, out.stderr
    assert "UTC" in out.stdout


async def test_serve_runs_a_sandboxed_server(tmp_path: Path, errlog) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the server\n")
    cfg = config(
        tmp_path / "serve.json",
        {"net": python_entry(NET_SERVER, {"network": "none"}), "py": python_entry(PY_SERVER, {})},
    )
    async with connect(serve_params(cfg), errlog) as client:
        names = sorted(t.name for t in (await client.list_tools()).tools)
        assert "net__read" in names and "py__echo" in names, names
        echoed = await client.call_tool("py__echo", {"text": "boxed"})
        assert echoed.content[0].text == "boxed", echoed
        refused = await client.call_tool("net__read", {"path": str(secret)})
        assert "Permission denied" in refused.content[0].text, refused
