"""Scenario: the Python SDK's 2026-07-28 client opens `subscriptions/listen`
(`Client.listen`) on `mcpvisor serve`, over stdio and over `--http`, and
receives the typed events of a handshake-era server behind the gateway: a
resource it named updated, the tool list changed. The server is mcpvisor's
fake worker, which lists a resource, takes subscriptions and sends what its
`notify` and `list_changed` tools are told to.

And the other way round: a Python SDK server driven in 2026-07-28
(`fixtures/listen_server.py`) tells of its changes only on a listen; the
gateway opens one of its own there, and clients of both eras hear them.
"""

from __future__ import annotations

import json
from pathlib import Path

import sys

import anyio
import mcp.types as types
import pytest
from interop_util import connect, mcpvisor_bin, serve_params
from mcp.shared.subscriptions import ResourceUpdated, ToolsListChanged
from test_http import client as http_client
from test_http import http_front, serve_args

STATELESS = "2026-07-28"


def write_config(tmp_path: Path) -> tuple[Path, Path]:
    """A config with the fake worker as `docs`; the file its extra tools are
    read from."""
    worker = mcpvisor_bin().parent / "mcpvisor-fake-worker"
    if not worker.exists():
        pytest.skip(f"{worker} is missing: build it with `cargo build -p mcpvisor-fixtures`")
    tools = tmp_path / "tools.txt"
    tools.write_text("first\n")
    config = tmp_path / "mcp.json"
    args = ["--resource", "mem://doc", "--resource", "mem://other", "--tools-file", str(tools)]
    # The server gains a tool while served: unpinned, so that the tool is
    # listed at once rather than held back until a person approves it.
    entry = {"command": str(worker), "args": args, "pin": "off"}
    config.write_text(json.dumps({"mcpServers": {"docs": entry}}))
    return config, tools


async def _listen_and_hear(client, tools: Path) -> None:
    assert client.session.protocol_version == STATELESS
    await client.list_tools()
    async with client.listen(tools_list_changed=True, resource_subscriptions=["mem://doc", "mem://none"]) as sub:
        assert sub.honored.tools_list_changed
        # A URI no server lists is not honoured.
        assert sub.honored.resource_subscriptions == ["mem://doc"]
        updated = {"method": "notifications/resources/updated", "params": {"uri": "mem://doc"}}
        await client.call_tool("docs__notify", updated)
        with anyio.fail_after(20):
            event = await anext(sub)
        assert event == ResourceUpdated(uri="mem://doc")
        tools.write_text("first\nsecond\n")
        await client.call_tool("docs__list_changed", {})
        with anyio.fail_after(20):
            event = await anext(sub)
        assert event == ToolsListChanged()
    assert "docs__second" in {t.name for t in (await client.list_tools()).tools}


async def test_listen_over_stdio(tmp_path: Path, errlog) -> None:
    config, tools = write_config(tmp_path)
    async with connect(serve_params(config), errlog, mode=STATELESS) as client:
        await _listen_and_hear(client, tools)


async def test_listen_over_http(tmp_path: Path, errlog) -> None:
    config, tools = write_config(tmp_path)
    async with http_front(serve_args(config), errlog, cwd=tmp_path) as front:
        async with http_client(front.url, STATELESS) as client:
            await _listen_and_hear(client, tools)


LISTEN_SERVER = Path(__file__).parent / "fixtures" / "listen_server.py"


def write_listen_server_config(tmp_path: Path) -> Path:
    """A config with the Python SDK's listen server as `lst`, unpinned (it
    gains a tool while served), and driven in 2026-07-28 as one process
    for clients of both eras: they share its memory (under "auto" the
    handshake-era client would be served by a second process, with a
    memory of its own)."""
    config = tmp_path / "mcp.json"
    entry = {
        "command": sys.executable,
        "args": ["-u", str(LISTEN_SERVER)],
        "pin": "off",
        "era": "2026-07-28",
    }
    config.write_text(json.dumps({"mcpServers": {"lst": entry}}))
    return config


class Heard:
    """The notifications a handshake-era client is sent: (method, uri)."""

    def __init__(self) -> None:
        self.notifications: list[tuple[str, str | None]] = []

    async def __call__(self, message) -> None:
        if isinstance(message, types.ServerNotification):
            uri = getattr(getattr(message, "params", None), "uri", None)
            self.notifications.append((message.method, None if uri is None else str(uri)))


async def _until(what: str, done) -> None:
    with anyio.fail_after(20):
        while not done():
            await anyio.sleep(0.05)


async def test_a_2026_server_is_heard_by_clients_of_both_eras(tmp_path: Path, errlog) -> None:
    config = write_listen_server_config(tmp_path)
    heard = Heard()
    # One gateway for both clients: over --http.
    async with (
        http_front(serve_args(config), errlog, cwd=tmp_path) as front,
        http_client(front.url, STATELESS) as new,
        http_client(front.url, "legacy", message_handler=heard) as old,
    ):
        assert new.session.protocol_version == STATELESS
        assert {t.name for t in (await old.list_tools()).tools} == {"lst__touch", "lst__grow"}
        # The handshake-era client subscribes as its era does; the server has
        # no resources/subscribe, the gateway's own listen carries it.
        await old.subscribe_resource("mem://note")
        await new.list_tools()
        async with new.listen(tools_list_changed=True, resource_subscriptions=["mem://note"]) as sub:
            assert sub.honored.resource_subscriptions == ["mem://note"]
            await new.call_tool("lst__touch", {})
            with anyio.fail_after(20):
                event = await anext(sub)
            assert event == ResourceUpdated(uri="mem://note")
            await _until(
                "the old client told of the update",
                lambda: ("notifications/resources/updated", "mem://note") in heard.notifications,
            )
            await old.call_tool("lst__grow", {})
            with anyio.fail_after(20):
                event = await anext(sub)
            assert event == ToolsListChanged()
            await _until(
                "the old client told of the new tool",
                lambda: ("notifications/tools/list_changed", None) in heard.notifications,
            )
        assert "lst__grown" in {t.name for t in (await old.list_tools()).tools}
