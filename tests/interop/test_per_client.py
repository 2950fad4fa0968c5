"""Scenario: `mcpvisor serve --http` with a `"sessions": "per-client"` server.

Each HTTP session gets a process of its own for that server: its calls, its
requests to the client (sampling) and its notifications stay with it, and the
process stops when the session ends. A shared server beside it keeps one
process for every session.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import mcp.types as types
from interop_util import EVERYTHING_JS, PY_SERVER, alive, eventually, node_bin, wait_dead
from test_http import LEGACY, SAMPLED_TEXT, Peer, _has_tools, _text, _texts, client, http_front, serve_args


def write_config(tmp_path: Path) -> Path:
    config = tmp_path / "mcp.json"
    py = {"command": sys.executable, "args": ["-u", str(PY_SERVER)]}
    servers = {
        "own": {**py, "sessions": "per-client"},
        "shared": py,
        "ask": {"command": node_bin(), "args": [str(EVERYTHING_JS), "stdio"], "sessions": "per-client"},
    }
    config.write_text(json.dumps({"mcpServers": servers}, indent=2))
    return config


async def test_each_session_has_its_own_process_and_it_stops_with_the_session(tmp_path: Path, errlog) -> None:
    async with http_front(serve_args(write_config(tmp_path)), errlog, cwd=tmp_path) as front:
        async with client(front.url, LEGACY) as b:
            await _has_tools(b, "own__pid", "shared__pid")
            async with client(front.url, LEGACY) as a:
                await _has_tools(a, "own__pid", "shared__pid")
                a_own = int(_text(await a.call_tool("own__pid", {})))
                b_own = int(_text(await b.call_tool("own__pid", {})))
                a_shared = int(_text(await a.call_tool("shared__pid", {})))
                b_shared = int(_text(await b.call_tool("shared__pid", {})))
                assert a_own != b_own, "a per-client server gives each session its own process"
                assert a_shared == b_shared, "a shared server is one process for every session"
                assert len({a_own, b_own, a_shared}) == 3
                # The same session keeps its process.
                assert int(_text(await a.call_tool("own__pid", {}))) == a_own
            # A left (its client sent DELETE): its process stops, B's does not.
            await wait_dead(a_own, timeout=15)
            assert alive(b_own) and alive(a_shared)
            assert int(_text(await b.call_tool("own__pid", {}))) == b_own
            assert _text(await b.call_tool("own__echo", {"text": "still here"})) == "still here"


async def test_a_per_client_servers_questions_go_to_its_own_session(tmp_path: Path, errlog) -> None:
    """Two sessions sample at once through a per-client server: each client is
    asked exactly once, by its own process (over a shared server, a question
    that cannot be attributed to one session is declined)."""
    peers = (Peer(), Peer())
    results: dict[int, types.CallToolResult] = {}
    async with http_front(serve_args(write_config(tmp_path)), errlog, cwd=tmp_path) as front:
        async with (
            client(front.url, LEGACY, sampling_callback=peers[0].sampling) as a,
            client(front.url, LEGACY, sampling_callback=peers[1].sampling) as b,
        ):
            for c in (a, b):
                await _has_tools(c, "ask__trigger-sampling-request")

            async def sample(i: int, c) -> None:
                results[i] = await c.call_tool("ask__trigger-sampling-request", {"prompt": f"from {i}", "maxTokens": 5})

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(sample, 0, a)
                    tg.start_soon(sample, 1, b)
    for i, peer in enumerate(peers):
        assert len(peer.sampling_requests) == 1, peer.sampling_requests
        asked = peer.sampling_requests[0]["messages"][0]["content"]["text"]
        assert asked.endswith(f"from {i}"), asked
        (text,) = _texts(results[i])
        assert SAMPLED_TEXT in text


async def test_a_per_client_server_is_listed_before_any_session_uses_it(tmp_path: Path, errlog) -> None:
    """Its lists are read once (a start that stops again), so a client sees
    its tools before its own process exists."""
    async with http_front(serve_args(write_config(tmp_path)), errlog, cwd=tmp_path) as front:
        async with client(front.url, LEGACY) as c:
            await eventually(lambda: _listed(c), timeout=20, interval=0.1)


async def _listed(c) -> bool:
    names = {t.name for t in (await c.list_tools()).tools}
    return {"own__pid", "own__sleep", "ask__echo"} <= names
