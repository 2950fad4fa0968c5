"""Scenario: `mcpvisor wrap` on a client's config file, then the Python SDK's
stdio client starts each server the way the client would, from the command
and arguments it reads in the wrapped file, and calls it; `mcpvisor unwrap`
then gives back the original file byte for byte."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

from interop_util import EVERYTHING_JS, PY_SERVER, connect, node_bin, run_mcpvisor
from mcp import StdioServerParameters

TIMEOUT = 60


def mcpvisor(*args: str) -> subprocess.CompletedProcess[str]:
    return run_mcpvisor(*args, timeout=TIMEOUT)


def claude_desktop(path: Path) -> None:
    # Claude Desktop's layout, with a field mcpvisor does not know.
    servers = {
        "py": {"command": sys.executable, "args": ["-u", str(PY_SERVER)], "env": {"PYTHONUNBUFFERED": "1"}},
        "everything": {"args": [str(EVERYTHING_JS), "stdio"], "command": node_bin(), "autoApprove": []},
        "remote": {"url": "https://example.com/mcp"},
    }
    path.write_text(json.dumps({"globalShortcut": "", "mcpServers": servers}, indent=2) + "\n")


def codex(path: Path) -> None:
    path.write_text(
        "# Codex\n"
        'model = "gpt-5-codex"\n\n'
        "[mcp_servers.py]\n"
        f"command = {json.dumps(sys.executable)}  # the test's Python\n"
        f'args = ["-u", {json.dumps(str(PY_SERVER))}]\n\n'
        "[mcp_servers.py.env]\n"
        'PYTHONUNBUFFERED = "1"\n\n'
        "[mcp_servers.everything]\n"
        f"command = {json.dumps(node_bin())}\n"
        f'args = [{json.dumps(str(EVERYTHING_JS))}, "stdio"]\n'
    )


def read_servers(path: Path) -> dict:
    """The servers as the client reads them from its file."""
    if path.suffix == ".toml":
        return tomllib.loads(path.read_text())["mcp_servers"]
    return json.loads(path.read_text())["mcpServers"]


async def call_each(servers: dict) -> None:
    for name, entry in servers.items():
        if "command" not in entry:
            continue
        assert Path(entry["command"]).name == "mcpvisor", entry
        assert entry["args"][:2] == ["run", "--"], entry
        params = StdioServerParameters(command=entry["command"], args=entry["args"], env=entry.get("env"))
        with open("/dev/null", "w") as errlog:
            async with connect(params, errlog) as client:
                tools = [t.name for t in (await client.list_tools()).tools]
                assert "echo" in tools, (name, tools)
                if name == "py":
                    result = await client.call_tool("echo", {"text": "wrapped"})
                else:
                    result = await client.call_tool("echo", {"message": "wrapped"})
                assert "wrapped" in json.dumps(result.model_dump(mode="json")["content"]), (name, result)


async def test_wrapped_claude_desktop_and_codex_files_start_in_the_sdk_client(tmp_path: Path) -> None:
    for name, write in (("claude_desktop_config.json", claude_desktop), ("config.toml", codex)):
        path = tmp_path / name
        write(path)
        original = path.read_bytes()
        out = mcpvisor("wrap", "--config", str(path))
        assert out.returncode == 0, out.stderr
        assert "wrapped py, everything" in out.stdout, out.stdout
        assert path.read_bytes() != original
        await call_each(read_servers(path))
        out = mcpvisor("unwrap", "--config", str(path))
        assert out.returncode == 0, out.stderr
        assert path.read_bytes() == original
