"""Scenario: the Python SDK's own Streamable HTTP server (the conformance
fixture with `--http PORT`) as a remote server of mcpvisor: `serve` with a
`url` entry (the SDK's client over stdio, with sampling answered through the
gateway), `inspect --url` and `call --url`, and `connect` in front of it.
Then the SDK's server over the old HTTP+SSE transport (`--sse PORT`): a
`"type": "sse"` entry through `serve`, and `inspect --url` and `call --url`
on its event stream, which fall back to that transport by themselves.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import pytest

import mcp.types as types
from interop_util import TAG_VAR, HERE, connect, mcpvisor_bin, process_tag, serve_params
from mcp import StdioServerParameters

FIXTURE = HERE / "fixtures" / "conformance_server.py"
SAMPLED = "sampled for the remote server"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def sdk_http_server(errlog: TextIO, transport: str = "--http") -> Iterator[str]:
    """The fixture served by the SDK's own Streamable HTTP (or, with
    `--sse`, its HTTP+SSE transport); yields its URL."""
    port = _free_port()
    env = {**os.environ, TAG_VAR: process_tag()}
    proc = subprocess.Popen(
        [sys.executable, "-u", str(FIXTURE), transport, str(port)],
        stdout=errlog,
        stderr=errlog,
        env=env,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None, "the SDK server ended before it listened"
            assert time.monotonic() < deadline, "the SDK server did not listen within 20 s"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/" + ("sse" if transport == "--sse" else "mcp")
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


async def _sampling(_ctx, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=SAMPLED),
        model="interop-remote-model",
        stop_reason="endTurn",
    )


def _text(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


# The SDK's server over each transport, and the entry that reaches it: a
# `url` alone (Streamable HTTP), and `"type": "sse"` (the old HTTP+SSE).
TRANSPORTS = [("--http", {}), ("--sse", {"type": "sse"})]


@pytest.mark.parametrize(("transport", "entry"), TRANSPORTS, ids=["streamable-http", "sse"])
async def test_serve_url_entry_over_the_sdk_server(
    tmp_path: Path, errlog, transport: str, entry: dict[str, str]
) -> None:
    with sdk_http_server(errlog, transport) as url:
        config = tmp_path / "mcp.json"
        config.write_text(json.dumps({"mcpServers": {"sdk": {**entry, "url": url}}}))
        async with connect(
            serve_params(config), errlog, mode="legacy", sampling_callback=_sampling
        ) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            assert {"sdk__test_simple_text", "sdk__test_tool_with_progress", "sdk__test_sampling"} <= names
            assert _text(await c.call_tool("sdk__test_simple_text", {})) == (
                "This is a simple text response for testing."
            )
            progress: list[float] = []

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                progress.append(value)

            result = await c.call_tool("sdk__test_tool_with_progress", {}, progress_callback=on_progress)
            assert _text(result) == "Tool with progress executed successfully"
            assert progress == [0, 50, 100]
            # The server's own request travels back to this client and its
            # answer to the server (over HTTP+SSE: a message event, then a POST).
            sampled = _text(await c.call_tool("sdk__test_sampling", {"prompt": "hi"}))
            assert SAMPLED in sampled, sampled


async def test_connect_in_front_of_the_sdk_http_server(errlog) -> None:
    with sdk_http_server(errlog) as url:
        params = StdioServerParameters(
            command=str(mcpvisor_bin()), args=["connect", "-q", url], env={TAG_VAR: process_tag()}
        )
        async with connect(params, errlog, mode="legacy", sampling_callback=_sampling) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            assert "test_simple_text" in names
            sampled = _text(await c.call_tool("test_sampling", {"prompt": "hi"}))
            assert SAMPLED in sampled, sampled


@pytest.mark.parametrize("transport", ["--http", "--sse"], ids=["streamable-http", "sse"])
def test_inspect_and_call_url(errlog, transport: str) -> None:
    # Over HTTP+SSE, `--url` falls back by itself when the POST is refused.
    with sdk_http_server(errlog, transport) as url:
        env = {**os.environ, TAG_VAR: process_tag()}
        out = subprocess.run(
            [str(mcpvisor_bin()), "inspect", "--json", "--url", url],
            capture_output=True, text=True, timeout=60, env=env,
        )
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        assert report["server"]["name"] == "mcpvisor-conformance-fixture"
        assert "test_simple_text" in {t["name"] for t in report["tools"]}
        out = subprocess.run(
            [str(mcpvisor_bin()), "call", "--url", url, "test_simple_text"],
            capture_output=True, text=True, timeout=60, env=env,
        )
        assert (out.returncode, out.stdout.strip()) == (0, "This is a simple text response for testing."), out.stderr

